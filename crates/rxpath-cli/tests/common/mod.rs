//! Helpers shared by the CLI's root tests.

use std::process::Child;

/// Wait for an `rxpath echo --json` child, require a clean exit and every
/// frame back in the pool, and return its report.
pub fn echo_report(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "echo failed: {stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["frames_home"], v["frames_total"], "every frame home: {v}");
    v
}
