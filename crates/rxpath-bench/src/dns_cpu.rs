//! `bench dns`'s CPU per answer at every offered rate: each mode's server
//! CPU per answered query at each rate of a round, and a mode against
//! Knot's XDP mode at the rates both answered without loss. Where the
//! scheduler holds the server's core off, the loss-free rate measures the
//! depth of a mode's queues as much as its cost; the CPU an answer takes
//! at the same offered rate is the figure that holds on any machine.

use crate::figure::{self, Bound, Verdict};
use crate::harness::median;
use crate::plot::{Axes, Legend, ReportDir, Series};

/// One offered rate of one mode's round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AtRate {
    /// Offered queries/s.
    pub(crate) rate: u64,
    /// The server process's CPU (it and its threads) per answered
    /// query, µs.
    pub(crate) cpu_us: f64,
    /// Queries lost, % of those sent.
    pub(crate) lost_pct: f64,
}

impl AtRate {
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "rate": self.rate, "server_cpu_us_per_query": self.cpu_us, "lost_pct": self.lost_pct,
        })
    }
}

/// `a`'s CPU per query over `b`'s at each offered rate both answered with
/// under `loss` % lost, in `a`'s order.
pub(crate) fn shared(a: &[AtRate], b: &[AtRate], loss: f64) -> Vec<(u64, f64)> {
    a.iter()
        .filter(|x| x.lost_pct < loss)
        .filter_map(|x| {
            let y = b.iter().find(|y| y.rate == x.rate && y.lost_pct < loss)?;
            figure::ratio(Some(x.cpu_us), Some(y.cpu_us)).map(|r| (x.rate, r))
        })
        .collect()
}

/// The median of [`shared`]'s ratios; `None` without a shared rate.
pub(crate) fn shared_median(a: &[AtRate], b: &[AtRate], loss: f64) -> Option<f64> {
    let v: Vec<f64> = shared(a, b, loss).into_iter().map(|(_, r)| r).collect();
    (!v.is_empty()).then(|| median(v))
}

/// Per round ([`shared_median`] of `a` over `b` in each), and their median
/// over the rounds that had a shared rate.
pub(crate) fn over_rounds<'a>(
    rounds: impl Iterator<Item = (&'a [AtRate], &'a [AtRate])>,
    loss: f64,
) -> (Vec<Option<f64>>, Option<f64>) {
    let per: Vec<Option<f64>> = rounds.map(|(a, b)| shared_median(a, b, loss)).collect();
    let v: Vec<f64> = per.iter().flatten().copied().collect();
    let med = (!v.is_empty()).then(|| median(v));
    (per, med)
}

/// A mode's CPU per query at each offered rate it answered without loss
/// in some round: the median over those rounds, in rate order.
pub(crate) fn by_rate(rounds: &[&[AtRate]], loss: f64) -> Vec<(u64, f64)> {
    let mut rates: Vec<u64> = rounds
        .iter()
        .flat_map(|r| r.iter().filter(|x| x.lost_pct < loss).map(|x| x.rate))
        .collect();
    rates.sort_unstable();
    rates.dedup();
    rates
        .into_iter()
        .map(|rate| {
            let v: Vec<f64> = rounds
                .iter()
                .filter_map(|r| r.iter().find(|x| x.rate == rate && x.lost_pct < loss))
                .map(|x| x.cpu_us)
                .collect();
            (rate, median(v))
        })
        .collect()
}

/// The table: offered rate, then each mode's CPU per query (median over
/// the rounds it answered that rate without loss), µs.
pub(crate) fn print_table(modes: &[(&str, Vec<(u64, f64)>)]) {
    let mut rates: Vec<u64> = modes
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.0))
        .collect();
    rates.sort_unstable();
    rates.dedup();
    println!("\nserver CPU per answered query, µs, at each offered rate answered without loss (median over rounds)");
    let head: Vec<String> = modes.iter().map(|(n, _)| format!("{n:>12}")).collect();
    println!("{:>10} {}", "queries/s", head.join(" "));
    for rate in rates {
        let cells: Vec<String> = modes
            .iter()
            .map(|(_, v)| {
                let c = v.iter().find(|p| p.0 == rate).map(|p| p.1);
                format!("{:>12}", figure::cell(c, 1.0, 2))
            })
            .collect();
        println!("{rate:>10} {}", cells.join(" "));
    }
}

/// The target on CPU per query against Knot's XDP mode: the median over
/// rounds of each round's median ratio at the shared rates, at most
/// `bound`.
pub(crate) fn target(
    what: &str,
    per_round: &[Option<f64>],
    med: Option<f64>,
    bound: f64,
) -> Verdict {
    let rounds: Vec<String> = per_round
        .iter()
        .map(|r| figure::ratio_cell(*r, 3))
        .collect();
    println!("{what}, per round: {}", rounds.join(", "));
    figure::target(
        what,
        med,
        Bound::AtMost(bound),
        "no rate answered without loss by both",
    )
}

/// The plot of [`print_table`]'s figures, one line per mode.
pub(crate) fn plot(rep: &mut ReportDir, modes: &[(&str, Vec<(u64, f64)>)]) -> anyhow::Result<()> {
    let series: Vec<Series> = modes
        .iter()
        .map(|(n, v)| Series {
            label: (*n).to_string(),
            points: v.iter().map(|&(r, c)| (r as f64, c)).collect(),
        })
        .collect();
    let axes = Axes {
        log_x: false,
        log_y: false,
        legend: Legend::UpperRight,
    };
    rep.lines(
        "dns-cpu-per-query",
        "knotd: server CPU per answered query at each offered rate (no loss)",
        ("offered queries/s", "µs of CPU per answered query"),
        &series,
        axes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rate: u64, cpu_us: f64, lost_pct: f64) -> AtRate {
        AtRate {
            rate,
            cpu_us,
            lost_pct,
        }
    }

    #[test]
    fn only_rates_both_answered_without_loss_are_compared() {
        let exec = [at(100, 4.0, 0.0), at(110, 4.4, 0.2), at(120, 4.8, 3.0)];
        let knot = [at(100, 5.0, 0.0), at(110, 4.0, 2.0), at(120, 4.0, 0.0)];
        // 110: Knot lost 2 %; 120: exec lost 3 %.
        assert_eq!(shared(&exec, &knot, 1.0), vec![(100, 0.8)]);
        assert_eq!(shared_median(&exec, &knot, 1.0), Some(0.8));
        assert_eq!(shared_median(&exec, &knot, 5.0), Some(1.1));
        assert_eq!(shared_median(&exec[1..], &knot[1..2], 1.0), None);
    }

    #[test]
    fn rounds_without_a_shared_rate_do_not_count() {
        let (a1, b1) = ([at(100, 3.0, 0.0)], [at(100, 4.0, 0.0)]);
        let (a2, b2) = ([at(100, 3.0, 0.0)], [at(100, 4.0, 9.0)]);
        let (a3, b3) = ([at(100, 4.5, 0.0)], [at(100, 5.0, 0.0)]);
        let rounds = [(&a1[..], &b1[..]), (&a2[..], &b2[..]), (&a3[..], &b3[..])];
        let (per, med) = over_rounds(rounds.into_iter(), 1.0);
        assert_eq!(per, vec![Some(0.75), None, Some(0.9)]);
        assert!((med.unwrap() - 0.825).abs() < 1e-9, "{med:?}");
    }

    #[test]
    fn each_rate_takes_the_median_of_the_rounds_without_loss() {
        let r1 = [at(100, 3.0, 0.0), at(110, 3.5, 0.0)];
        let r2 = [at(100, 5.0, 0.0), at(110, 9.0, 4.0)];
        let r3 = [at(100, 4.0, 0.0)];
        let v = by_rate(&[&r1, &r2, &r3], 1.0);
        assert_eq!(v, vec![(100, 4.0), (110, 3.5)]);
    }
}
