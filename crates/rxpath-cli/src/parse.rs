//! The parsers of option values (durations, MACs, prefixes, fault
//! specs): a leaf module every command's options use.

use std::time::Duration;

/// Parse aa:bb:cc:dd:ee:ff.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("'{s}' is not a MAC address"));
    }
    for (d, p) in m.iter_mut().zip(parts) {
        *d = u8::from_str_radix(p, 16).map_err(|_| format!("'{s}' is not a MAC address"))?;
    }
    Ok(m)
}

/// `198.19.0.0/16`, `2001:2::/48` or an address (a /32 or /128).
pub fn parse_prefix(s: &str) -> Result<(std::net::IpAddr, u8), String> {
    let (a, l) = s.split_once('/').unwrap_or((s, ""));
    let a: std::net::IpAddr = a
        .parse()
        .map_err(|_| format!("'{s}' is not an address or prefix"))?;
    let max = if a.is_ipv4() { 32 } else { 128 };
    let l = if l.is_empty() {
        max
    } else {
        l.parse::<u8>()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("'{s}': the prefix length must be 0..={max}"))?
    };
    Ok((a, l))
}

/// Accept 5, 5s, 500ms, 2m.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("'{s}' is not a duration (try 5, 5s, 500ms or 1m)");
    let (num, mul) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    if !v.is_finite() || v <= 0.0 || v * mul > 86_400.0 {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(v * mul))
}

/// `--fault garbage=P,lying=P,starve=MS[,starve-every=MS],stall=MS[,stall-every=MS],seed=N`.
pub fn parse_faults(s: &str) -> Result<rxpath_dev::sim::Faults, String> {
    const KINDS: &str = "garbage, lying, starve, starve-every, stall, stall-every, seed";
    let mut f = rxpath_dev::sim::Faults {
        starve_every_ms: 100.0,
        stall_every_ms: 100.0,
        ..Default::default()
    };
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: want KIND=VALUE ({KINDS})"))?;
        let num = || -> Result<f64, String> {
            let x: f64 = v.parse().map_err(|_| format!("{k}={v}: not a number"))?;
            if !x.is_finite() || x < 0.0 {
                return Err(format!("{k}={v}: not a number of 0 or more"));
            }
            Ok(x)
        };
        let share = || -> Result<f64, String> {
            let p = num()?;
            if p > 1.0 {
                return Err(format!("{k}={v}: a share is 0 to 1"));
            }
            Ok(p)
        };
        let ms = || -> Result<f64, String> {
            let m = num()?;
            if m > 10_000.0 {
                return Err(format!("{k}={v}: at most 10000 ms"));
            }
            Ok(m)
        };
        match k {
            "garbage" => f.garbage = share()?,
            "lying" => f.lying = share()?,
            "starve" => f.starve_ms = ms()?,
            "starve-every" => f.starve_every_ms = ms()?.max(0.01),
            "stall" => f.stall_ms = ms()?,
            "stall-every" => f.stall_every_ms = ms()?.max(0.01),
            "seed" => f.seed = v.parse().map_err(|_| format!("seed={v}: not a number"))?,
            o => return Err(format!("unknown fault {o:?}: {KINDS}")),
        }
    }
    if f.garbage + f.lying > 1.0 {
        return Err("the shares add up to more than 1".into());
    }
    Ok(f)
}
