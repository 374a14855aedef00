//! `rxpath bench ... --report DIR`: the JSON of every run and the plots
//! (PNG and SVG, drawn with `plotters`), and a progress bar on a terminal.
//!
//! The plots use an embedded font (DejaVu Sans, `assets/`), so they draw
//! the same on a machine without any system font. Every chart is drawn
//! twice from one function, once per backend.

use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const SIZE: (u32, u32) = (1000, 560);

/// The eight colours of the Okabe–Ito palette (readable with every common
/// kind of colour blindness), black last.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(86, 180, 233),
    RGBColor(204, 121, 167),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// One bar: the median of the rounds, and their range as a whisker.
#[derive(Debug, Clone)]
pub(crate) struct Bar {
    pub label: String,
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
}

impl Bar {
    /// Median and range of `samples` (scaled by `scale`); `None` when no
    /// round measured this configuration (a peer that did not run gets no
    /// bar, and its label says so).
    pub(crate) fn of(label: impl Into<String>, samples: &[f64], scale: f64) -> Bar {
        let label = label.into();
        let v: Vec<f64> = samples
            .iter()
            .map(|x| x * scale)
            .filter(|x| x.is_finite())
            .collect();
        if v.is_empty() {
            return Bar {
                label: format!("{label} (not measured)"),
                value: 0.0,
                lo: 0.0,
                hi: 0.0,
            };
        }
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Bar {
            label,
            value: crate::harness::median(v),
            lo,
            hi,
        }
    }
}

/// A line of points, drawn with markers.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// How a line chart shows its data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Axes {
    pub log_x: bool,
    pub log_y: bool,
    /// Where the legend goes: the corner the lines leave empty.
    pub legend: Legend,
}

/// A corner of the plot.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Legend {
    UpperLeft,
    UpperRight,
    LowerLeft,
    LowerRight,
}

impl Legend {
    fn position(self) -> SeriesLabelPosition {
        match self {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::UpperRight => SeriesLabelPosition::UpperRight,
            Legend::LowerLeft => SeriesLabelPosition::LowerLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        }
    }
}

impl Axes {
    pub(crate) const LOG_X: Axes = Axes {
        log_x: true,
        log_y: false,
        legend: Legend::UpperRight,
    };
    pub(crate) const LOG_XY: Axes = Axes {
        log_x: true,
        log_y: true,
        legend: Legend::UpperLeft,
    };
}

/// The report directory of one bench run.
pub(crate) struct ReportDir {
    dir: PathBuf,
    written: Vec<PathBuf>,
    /// `YYYY-MM-DD` of the run, the first part of every file's name.
    date: String,
    /// The commit the binary runs from (`-dirty` with uncommitted
    /// changes), the last part of every file's name.
    commit: String,
    /// The JSON documents, written at [`ReportDir::finish`] with what the
    /// run could not measure and the machine it ran on.
    pending: Vec<(String, serde_json::Value)>,
    /// `-N` when DIR already holds N-1 runs of this bench on this commit
    /// and day (the first run has none).
    run: String,
}

/// The output of a command, trimmed, when it ran and succeeded.
fn output_of(cmd: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// The short commit of the checkout in the working directory, `-dirty`
/// when tracked files changed; `unknown` outside a git checkout.
fn commit() -> String {
    match output_of("git", &["rev-parse", "--short=7", "HEAD"]) {
        Some(c) => {
            let dirty = output_of("git", &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{c}-dirty")
            } else {
                c
            }
        }
        None => "unknown".into(),
    }
}

/// The machine a run was measured on: CPU model and count, kernel.
pub(crate) fn machine() -> serde_json::Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|x| x.1.trim())
        })
        .unwrap_or("unknown");
    serde_json::json!({
        "cpu": model,
        "cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "kernel": output_of("uname", &["-r"]).unwrap_or_default(),
    })
}

impl ReportDir {
    /// `None` without `--report`. `bench` names the run's JSON.
    pub(crate) fn open(dir: Option<&Path>, bench: &str) -> Result<Option<ReportDir>> {
        let Some(dir) = dir else { return Ok(None) };
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--report {}: cannot create it", dir.display()))?;
        register_font();
        let mut r = ReportDir {
            dir: dir.to_path_buf(),
            written: Vec::new(),
            date: output_of("date", &["-u", "+%F"]).unwrap_or_else(|| "undated".into()),
            commit: commit(),
            pending: Vec::new(),
            run: String::new(),
        };
        // Runs of the same bench on the same commit and day never
        // overwrite each other: the second is -2, the third -3.
        let mut n = 1;
        while r.dir.join(r.file(bench, "json")).exists() {
            n += 1;
            r.run = format!("-{n}");
        }
        Ok(Some(r))
    }

    /// `DATE-NAME-COMMIT.EXT`: runs of the same bench on other days or
    /// other code never overwrite each other.
    fn file(&self, name: &str, ext: &str) -> String {
        format!("{}-{name}-{}{}.{ext}", self.date, self.commit, self.run)
    }

    fn path(&mut self, file: String) -> PathBuf {
        let p = self.dir.join(file);
        self.written.push(p.clone());
        p
    }

    /// `DATE-NAME-COMMIT.json`, pretty-printed, written when the run
    /// ends (with `not_measured`, `machine`, `commit` and `date` added).
    pub(crate) fn json(&mut self, name: &str, v: &serde_json::Value) -> Result<()> {
        self.pending.push((name.to_string(), v.clone()));
        Ok(())
    }

    /// Horizontal bars with the range of the rounds as whiskers.
    pub(crate) fn bars(
        &mut self,
        name: &str,
        title: &str,
        x_label: &str,
        bars: &[Bar],
    ) -> Result<()> {
        if bars.is_empty() {
            bail!("plot {name}: no bars");
        }
        let plot = Plot::Bars {
            title: title.into(),
            x_label: x_label.into(),
            bars: bars.to_vec(),
        };
        self.draw(name, plot)
    }

    /// Lines with markers; a log axis for a quantity that spans decades.
    pub(crate) fn lines(
        &mut self,
        name: &str,
        title: &str,
        (x_label, y_label): (&str, &str),
        series: &[Series],
        axes: Axes,
    ) -> Result<()> {
        // A point a log axis cannot show, or a value not measured, is left
        // out (the JSON has every value).
        let series: Vec<Series> = series
            .iter()
            .map(|s| Series {
                label: s.label.clone(),
                points: s
                    .points
                    .iter()
                    .copied()
                    .filter(|p| {
                        p.0.is_finite()
                            && p.1.is_finite()
                            && (!axes.log_x || p.0 > 0.0)
                            && (!axes.log_y || p.1 > 0.0)
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            bail!("plot {name}: no points");
        }
        let plot = Plot::Lines {
            title: title.into(),
            labels: (x_label.into(), y_label.into()),
            series,
            axes,
        };
        self.draw(name, plot)
    }

    /// Empirical CDFs of samples (latencies), one line per series, on a
    /// logarithmic axis so that the tail shows.
    pub(crate) fn cdf(
        &mut self,
        name: &str,
        title: &str,
        x_label: &str,
        series: &[(String, Vec<f64>)],
    ) -> Result<()> {
        let lines: Vec<Series> = series
            .iter()
            .map(|(label, v)| Series {
                label: label.clone(),
                points: cdf_points(v),
            })
            .collect();
        let axes = Axes {
            legend: Legend::LowerRight,
            ..Axes::LOG_X
        };
        self.lines(
            name,
            title,
            (x_label, "fraction of samples ≤ x"),
            &lines,
            axes,
        )
    }

    fn draw(&mut self, name: &str, plot: Plot) -> Result<()> {
        let png = self.path(self.file(name, "png"));
        {
            let root = BitMapBackend::new(&png, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(plot_err)?;
            plot.draw(&root)?;
            root.present().map_err(plot_err)?;
        }
        let svg = self.path(self.file(name, "svg"));
        let root = SVGBackend::new(&svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        plot.draw(&root)?;
        root.present().map_err(plot_err)?;
        Ok(())
    }

    /// Write the JSON, each with the peers and targets the run could not
    /// measure (`not_measured`: empty when everything ran), and say where
    /// the report went.
    pub(crate) fn finish(mut self, not_measured: &[String]) -> Result<()> {
        for (name, v) in std::mem::take(&mut self.pending) {
            let mut doc = serde_json::json!({
                "bench": name, "date": self.date, "commit": self.commit,
                "machine": machine(), "not_measured": not_measured,
            });
            match v {
                serde_json::Value::Object(m) => {
                    doc.as_object_mut().expect("an object").extend(m);
                }
                other => doc["results"] = other,
            }
            let p = self.path(self.file(&name, "json"));
            std::fs::write(&p, serde_json::to_string_pretty(&doc)? + "\n")
                .with_context(|| format!("writing {}", p.display()))?;
        }
        println!(
            "\nreport: {} file(s) in {}",
            self.written.len(),
            self.dir.display()
        );
        Ok(())
    }
}

/// One chart, drawn on either backend.
enum Plot {
    Bars {
        title: String,
        x_label: String,
        bars: Vec<Bar>,
    },
    Lines {
        title: String,
        labels: (String, String),
        series: Vec<Series>,
        axes: Axes,
    },
}

impl Plot {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        match self {
            Plot::Bars {
                title,
                x_label,
                bars,
            } => draw_bars(root, title, x_label, bars),
            Plot::Lines {
                title,
                labels,
                series,
                axes,
            } => draw_lines(root, title, (&labels.0, &labels.1), series, *axes),
        }
    }
}

fn plot_err<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow::anyhow!("plotting: {e}")
}

fn register_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            // The font is ours and parses; an error here would be a broken
            // asset, which every plot test catches.
            let _ = plotters::style::register_font("sans-serif", style, FONT);
        }
    });
}

/// The points of an empirical CDF: at most ~400 of them (every sample of a
/// short run, evenly spaced quantiles of a long one, and always the last).
fn cdf_points(v: &[f64]) -> Vec<(f64, f64)> {
    let mut s: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| x.is_finite() && *x > 0.0)
        .collect();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return Vec::new();
    }
    let step = n.div_ceil(400).max(1);
    let mut pts: Vec<(f64, f64)> = (0..n)
        .step_by(step)
        .map(|i| (s[i], (i + 1) as f64 / n as f64))
        .collect();
    if pts.last().map(|p| p.1) != Some(1.0) {
        pts.push((s[n - 1], 1.0));
    }
    pts
}

fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    bars: &[Bar],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let max = bars
        .iter()
        .map(|b| b.hi.max(b.value))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.12;
    let n = bars.len();
    let label_width = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0) as u32
        * 8
        + 16;
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(label_width.clamp(60, 460))
        // A discrete range `0..k` has k + 1 segments: n bars need `0..n - 1`.
        .build_cartesian_2d(0.0..max, (0..n as i32 - 1).into_segmented())
        .map_err(plot_err)?;
    // The first bar at the top, as the table lists it: bar i sits in
    // segment n - 1 - i (segments count from the bottom).
    let labels: Vec<String> = bars.iter().rev().map(|b| b.label.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_desc(x_label)
        .y_labels(n)
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(plot_err)?;
    for (i, b) in bars.iter().enumerate() {
        let c = colour(i);
        let i = (n - 1 - i) as i32;
        chart
            .draw_series(std::iter::once({
                let mut r = Rectangle::new(
                    [
                        (0.0, SegmentValue::Exact(i)),
                        (b.value, SegmentValue::Exact(i + 1)),
                    ],
                    c.mix(0.75).filled(),
                );
                r.set_margin(5, 5, 0, 0);
                r
            }))
            .map_err(plot_err)?;
        if b.hi > b.lo {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![
                        (b.lo, SegmentValue::CenterOf(i)),
                        (b.hi, SegmentValue::CenterOf(i)),
                    ],
                    BLACK.stroke_width(2),
                )))
                .map_err(plot_err)?;
        }
        chart
            .draw_series(std::iter::once(Text::new(
                format_value(b.value),
                (b.hi.max(b.value) + max * 0.01, SegmentValue::CenterOf(i)),
                ("sans-serif", 14).into_font(),
            )))
            .map_err(plot_err)?;
    }
    Ok(())
}

fn format_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    axes: Axes,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let bounds = |f: fn(&(f64, f64)) -> f64| {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(f))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                (a.min(v), b.max(v))
            })
    };
    let (x0, x1) = bounds(|p| p.0);
    let (y0, y1) = bounds(|p| p.1);
    let mut builder = ChartBuilder::on(root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70);
    macro_rules! finish {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .x_labels(8)
                .y_labels(8)
                .x_label_formatter(&|v| tick(*v))
                .y_label_formatter(&|v| tick(*v))
                .label_style(("sans-serif", 14))
                .draw()
                .map_err(plot_err)?;
            for (i, s) in series.iter().enumerate() {
                let c = colour(i);
                chart
                    .draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
                    .map_err(plot_err)?
                    .label(s.label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
                    });
                if s.points.len() <= 40 {
                    chart
                        .draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                        .map_err(plot_err)?;
                }
            }
            chart
                .configure_series_labels()
                .position(axes.legend.position())
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .draw()
                .map_err(plot_err)?;
        }};
    }
    let log_range = |lo: f64, hi: f64| {
        let lo = if lo > 0.0 { lo / 1.3 } else { 1e-3 };
        lo..(hi * 1.3).max(lo * 10.0)
    };
    let lin_x = {
        let span = (x1 - x0).abs().max(1e-9);
        (x0 - span * 0.03)..(x1 + span * 0.03)
    };
    let lin_y = 0.0..y1.max(1e-9) * 1.08;
    match (axes.log_x, axes.log_y) {
        (true, true) => finish!(builder
            .build_cartesian_2d(log_range(x0, x1).log_scale(), log_range(y0, y1).log_scale())
            .map_err(plot_err)?),
        (true, false) => finish!(builder
            .build_cartesian_2d(log_range(x0, x1).log_scale(), lin_y)
            .map_err(plot_err)?),
        (false, true) => finish!(builder
            .build_cartesian_2d(lin_x, log_range(y0, y1).log_scale())
            .map_err(plot_err)?),
        (false, false) => finish!(builder.build_cartesian_2d(lin_x, lin_y).map_err(plot_err)?),
    }
    Ok(())
}

/// An axis tick: no decimals a reader does not need.
fn tick(v: f64) -> String {
    let a = v.abs();
    if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// A progress bar over a bench's steps on a terminal; nothing (not even
/// escape codes) when stderr is not one, as in CI or a pipe.
pub(crate) fn progress(steps: u64, what: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(steps);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed}, about {eta} left)",
    ) {
        pb.set_style(style.progress_chars("=> "));
    }
    pb.set_prefix(what.to_string());
    pb
}

/// A line for the log: above the progress bar on a terminal, on stderr
/// otherwise.
pub(crate) fn say(pb: &indicatif::ProgressBar, msg: &str) {
    if pb.is_hidden() {
        eprintln!("{msg}");
    } else {
        pb.println(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdf_points_are_monotone_and_end_at_one() {
        let v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let p = cdf_points(&v);
        assert!(p.len() <= 402, "{}", p.len());
        assert!(p.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
        assert_eq!(p.last(), Some(&(1000.0, 1.0)));
        assert_eq!(p[0], (1.0, 0.001));
        assert!(cdf_points(&[f64::NAN, -1.0]).is_empty());
    }

    /// A PNG that decodes to the size drawn, with text in it (the
    /// embedded font drew the title: dark pixels in the caption band), and
    /// an SVG that parses as XML and carries the title as text.
    fn check_plot(dir: &Path, rep: &ReportDir, name: &str, title: &str) {
        let png = image::open(dir.join(rep.file(name, "png")))
            .unwrap_or_else(|e| panic!("{name}.png: {e}"))
            .to_rgb8();
        assert_eq!(png.dimensions(), SIZE);
        let dark_in_caption = (0..SIZE.0)
            .flat_map(|x| (0..40).map(move |y| (x, y)))
            .filter(|&(x, y)| png.get_pixel(x, y).0.iter().all(|&c| c < 100))
            .count();
        assert!(
            dark_in_caption > 200,
            "{name}: no title drawn ({dark_in_caption})"
        );
        let svg = std::fs::read_to_string(dir.join(rep.file(name, "svg"))).unwrap();
        let doc = roxmltree::Document::parse(&svg).unwrap_or_else(|e| panic!("{name}.svg: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        assert!(doc
            .descendants()
            .any(|n| n.has_tag_name("text") && n.text().is_some_and(|t| t.contains(title))));
    }

    #[test]
    fn report_writes_json_and_valid_png_and_svg() {
        let dir = std::env::temp_dir().join(format!("rxpath-plot-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut rep = ReportDir::open(Some(&dir), "runs").unwrap().unwrap();
        rep.json("runs", &serde_json::json!({"rounds": [1.0, 2.0]}))
            .unwrap();
        rep.bars(
            "bars",
            "Bars title",
            "Mpps",
            &[
                Bar::of("a", &[1.0, 2.0, 3.0], 1.0),
                Bar::of("peer", &[], 1.0),
            ],
        )
        .unwrap();
        let s = |l: &str, k: f64| Series {
            label: l.into(),
            points: (0..5)
                .map(|i| (10f64.powi(i), k * f64::from(i + 1)))
                .collect(),
        };
        rep.lines(
            "lines",
            "Lines title",
            ("x", "y"),
            &[s("one", 1.0), s("two", 2.0)],
            Axes::LOG_XY,
        )
        .unwrap();
        let samples: Vec<f64> = (1..=5000).map(|i| 5.0 + f64::from(i % 97)).collect();
        rep.cdf("cdf", "CDF title", "µs", &[("server".into(), samples)])
            .unwrap();
        // Nothing to draw is an error, not an empty picture.
        assert!(rep.bars("none", "t", "x", &[]).is_err());
        assert!(rep
            .lines("none", "t", ("x", "y"), &[s("zero", 0.0)], Axes::LOG_XY)
            .is_err_and(|e| e.to_string().contains("no points")));
        check_plot(&dir, &rep, "bars", "Bars title");
        check_plot(&dir, &rep, "lines", "Lines title");
        check_plot(&dir, &rep, "cdf", "CDF title");
        // The JSON is written at the end, with what was not measured.
        let json = dir.join(rep.file("runs", "json"));
        rep.finish(&["a peer: why".to_string()]).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        assert_eq!(v["rounds"][1], 2.0);
        assert_eq!(v["not_measured"][0], "a peer: why");
        assert_eq!(v["bench"], "runs");
        // A second run of the same bench into the same folder: its own
        // files, the first run's kept.
        let mut again = ReportDir::open(Some(&dir), "runs").unwrap().unwrap();
        assert!(again.file("runs", "json").ends_with("-2.json"));
        again.json("runs", &serde_json::json!({})).unwrap();
        let second = dir.join(again.file("runs", "json"));
        again.finish(&[]).unwrap();
        assert!(second.exists());
        let jsons = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "json")
            })
            .count();
        assert_eq!(jsons, 2, "both runs kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bar_of_samples_is_median_and_range() {
        let b = Bar::of("x", &[3.0, 1.0, 2.0], 2.0);
        assert_eq!((b.value, b.lo, b.hi), (4.0, 2.0, 6.0));
        let none = Bar::of("peer", &[], 1.0);
        assert_eq!(none.label, "peer (not measured)");
    }
}
