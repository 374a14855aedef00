//! Figures a bench measured, ratios of them, and target lines: a figure
//! that is missing (a peer that failed, a row with no samples, a NaN) is
//! "not measured", never a zero, a NaN printed as a ratio, or a target met.

/// `v` when it is a measurement (finite); `None` for NaN or infinity.
pub(crate) fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// `num / den` when both were measured and the denominator is positive.
pub(crate) fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    let (n, d) = (finite(num?)?, finite(den?)?);
    (d > 0.0).then(|| n / d).and_then(finite)
}

/// A ratio for a table cell: `1.23x` (`places` decimals), or
/// `not measured`.
pub(crate) fn ratio_cell(r: Option<f64>, places: usize) -> String {
    match r.and_then(finite) {
        Some(r) => format!("{r:.places$}x"),
        None => "not measured".into(),
    }
}

/// A figure for a table cell (`places` decimals, `scale` applied), or
/// `not measured`.
pub(crate) fn cell(v: Option<f64>, scale: f64, places: usize) -> String {
    match v.and_then(finite) {
        Some(v) => format!("{:.places$}", v * scale),
        None => "not measured".into(),
    }
}

/// The side of a bound a figure must fall on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bound {
    /// The figure is at least this.
    AtLeast(f64),
    /// The figure is at most this.
    AtMost(f64),
}

/// A target's verdict in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Met,
    NotMet,
    NotMeasured,
}

impl Verdict {
    /// `true`, `false` or `null` in a JSON report.
    pub(crate) fn json(self) -> serde_json::Value {
        match self {
            Verdict::Met => true.into(),
            Verdict::NotMet => false.into(),
            Verdict::NotMeasured => serde_json::Value::Null,
        }
    }
}

/// How a target's figure reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A ratio: `1.93x`.
    Ratio,
    /// A share from 0 to 1, printed as a percentage: `99.2 %`.
    Share,
}

impl Unit {
    fn show(self, v: f64, places: usize) -> String {
        match self {
            Unit::Ratio => format!("{v:.places$}x"),
            Unit::Share => format!("{:.1} %", 100.0 * v),
        }
    }
}

/// The verdict of `figure` (in `unit`) against `bound`, and the line
/// that says it: `target WHAT: 1.93x (>= 1.90x): met`, or `target WHAT:
/// not measured (WHY)` when the figure is missing.
pub(crate) fn judge_in(
    unit: Unit,
    what: &str,
    figure: Option<f64>,
    bound: Bound,
    why: &str,
) -> (Verdict, String) {
    let Some(v) = figure.and_then(finite) else {
        return (
            Verdict::NotMeasured,
            format!("target {what}: not measured ({why})"),
        );
    };
    let (ok, op, b) = match bound {
        Bound::AtLeast(b) => (v >= b, ">=", b),
        Bound::AtMost(b) => (v <= b, "<=", b),
    };
    // Three places below 10: a ratio that sits at 0.90x is told apart
    // from its bound.
    let places = if b.abs() >= 10.0 { 1 } else { 3 };
    let verdict = if ok { Verdict::Met } else { Verdict::NotMet };
    let word = if ok { "met" } else { "NOT met" };
    (
        verdict,
        format!(
            "target {what}: {} ({op} {}): {word}",
            unit.show(v, places),
            unit.show(b, places)
        ),
    )
}

/// [`judge_in`] for a ratio, printed; a target not measured is also reported with the
/// peers not measured (so `--require-peers` fails the run).
pub(crate) fn target(what: &str, figure: Option<f64>, bound: Bound, why: &str) -> Verdict {
    target_in(Unit::Ratio, what, figure, bound, why)
}

/// [`target`] for a figure in `unit`.
pub(crate) fn target_in(
    unit: Unit,
    what: &str,
    figure: Option<f64>,
    bound: Bound,
    why: &str,
) -> Verdict {
    let (v, line) = judge_in(unit, what, figure, bound, why);
    println!("{line}");
    if v == Verdict::NotMeasured {
        crate::harness::peer_not_measured(&format!("target {what}"), why);
    }
    v
}

/// The order of `items` in round `round`: as given in even rounds, reversed
/// in odd ones, so that a drift of the machine over a round favours none.
pub(crate) fn in_turn<T: Copy>(items: &[T], round: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

/// A figure of entry `i` of each round's row, where finite.
pub(crate) fn column<R>(
    rows: &[Vec<R>],
    i: usize,
    f: &dyn Fn(&R) -> Option<f64>,
) -> Vec<Option<f64>> {
    rows.iter().map(|r| f(&r[i]).and_then(finite)).collect()
}

/// The median over rounds of the in-round ratio of entry `i` to `base`.
pub(crate) fn median_ratio<R>(
    rows: &[Vec<R>],
    i: usize,
    base: usize,
    f: &dyn Fn(&R) -> Option<f64>,
) -> Option<f64> {
    let v: Vec<f64> = column(rows, i, f)
        .into_iter()
        .zip(column(rows, base, f))
        .filter_map(|(n, d)| ratio(n, d))
        .collect();
    (!v.is_empty()).then(|| crate::harness::median(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_side_makes_no_ratio() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(3.0), None), None);
        assert_eq!(ratio(Some(3.0), Some(0.0)), None, "a zero base is no base");
        assert_eq!(ratio(Some(f64::NAN), Some(2.0)), None);
        assert_eq!(ratio(Some(3.0), Some(f64::NAN)), None);
        assert_eq!(ratio_cell(None, 2), "not measured");
        assert_eq!(ratio_cell(Some(f64::NAN), 2), "not measured");
        assert_eq!(ratio_cell(Some(1.234), 2), "1.23x");
        assert_eq!(cell(Some(f64::NAN), 1.0, 1), "not measured");
    }

    #[test]
    fn a_missing_figure_is_not_measured_never_met() {
        // The old `bench quic` turned a missing p99 into 0.0: "0.00x,
        // within the <= 0.8x target".
        let (v, line) = judge_in(
            Unit::Ratio,
            "p99",
            None,
            Bound::AtMost(0.8),
            "the client printed no p99",
        );
        assert_eq!(v, Verdict::NotMeasured);
        assert_eq!(line, "target p99: not measured (the client printed no p99)");
        let (v, _) = judge_in(
            Unit::Ratio,
            "p99",
            Some(f64::NAN),
            Bound::AtMost(0.8),
            "no answer",
        );
        assert_eq!(v, Verdict::NotMeasured);
        let (v, line) = judge_in(Unit::Ratio, "rate", Some(1.93), Bound::AtLeast(1.9), "");
        assert_eq!(
            (v, line.as_str()),
            (Verdict::Met, "target rate: 1.930x (>= 1.900x): met")
        );
        let (v, line) = judge_in(Unit::Ratio, "x", Some(42.2), Bound::AtLeast(50.0), "");
        assert_eq!(
            (v, line.as_str()),
            (Verdict::NotMet, "target x: 42.2x (>= 50.0x): NOT met")
        );
        assert_eq!(Verdict::NotMeasured.json(), serde_json::Value::Null);
        let (v, line) = judge_in(
            Unit::Share,
            "on reader",
            Some(0.992),
            Bound::AtLeast(0.99),
            "",
        );
        assert_eq!(
            (v, line.as_str()),
            (Verdict::Met, "target on reader: 99.2 % (>= 99.0 %): met")
        );
    }

    #[test]
    fn rounds_alternate_their_order() {
        assert_eq!(in_turn(&[1, 2, 3], 0), vec![1, 2, 3]);
        assert_eq!(in_turn(&[1, 2, 3], 1), vec![3, 2, 1]);
        assert_eq!(in_turn(&[1, 2, 3], 2), vec![1, 2, 3]);
    }
}
