//! Chart drawing with plotters' SVG backend: lines, scatter points and bars.
//!
//! Every function takes plain data and returns the SVG markup as a string, ready for
//! [`crate::Document::svg`]. Axis ranges come from the data; log axes drop non-positive points.

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::{ReportError, Series};

/// Title, axis labels, scales and size of one chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    pub width: u32,
    pub height: u32,
}

impl Chart {
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Chart {
            title: title.to_string(),
            x_label: x_label.to_string(),
            y_label: y_label.to_string(),
            log_x: false,
            log_y: false,
            width: 960,
            height: 400,
        }
    }

    pub fn log_x(mut self) -> Self {
        self.log_x = true;
        self
    }

    pub fn log_y(mut self) -> Self {
        self.log_y = true;
        self
    }

    fn error(&self, msg: impl std::fmt::Display) -> ReportError {
        ReportError {
            chart: self.title.clone(),
            msg: msg.to_string(),
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    Line,
    Dot,
}

fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        if hi <= lo {
            hi = lo * 10.0;
        }
        (lo, hi * 1.05)
    } else {
        let lo = lo.min(0.0);
        if hi <= lo {
            hi = lo + 1.0;
        }
        (lo, hi + (hi - lo) * 0.03)
    }
}

fn color(i: usize) -> RGBColor {
    const COLORS: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
    ];
    COLORS[i % COLORS.len()]
}

fn draw<X, Y>(
    area: &DrawingArea<SVGBackend, Shift>,
    chart: &Chart,
    x: X,
    y: Y,
    series: &[Series],
    mark: Mark,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let mut ctx = ChartBuilder::on(area)
        .caption(&chart.title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(|e| e.to_string())?;
    ctx.configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(chart.y_label.as_str())
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(|e| e.to_string())?;
    let keep = |&(px, py): &(f64, f64)| {
        px.is_finite() && py.is_finite() && (!chart.log_x || px > 0.0) && (!chart.log_y || py > 0.0)
    };
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        let points = s.points.iter().copied().filter(keep);
        let drawn = match mark {
            Mark::Line => ctx.draw_series(LineSeries::new(points, c.stroke_width(2))),
            Mark::Dot => ctx.draw_series(points.map(|p| Circle::new(p, 1, c.filled()))),
        }
        .map_err(|e| e.to_string())?;
        if !s.name.is_empty() {
            drawn.label(s.name.as_str()).legend(move |(lx, ly)| {
                Rectangle::new([(lx, ly - 4), (lx + 14, ly + 4)], c.filled())
            });
        }
    }
    if series.iter().any(|s| !s.name.is_empty()) {
        ctx.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    area.present().map_err(|e| e.to_string())
}

fn render(chart: &Chart, series: &[Series], mark: Mark) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let area =
            SVGBackend::with_string(&mut svg, (chart.width, chart.height)).into_drawing_area();
        area.fill(&WHITE).map_err(|e| chart.error(e))?;
        let all = || series.iter().flat_map(|s| s.points.iter());
        let (x0, x1) = range(all().map(|p| p.0), chart.log_x);
        let (y0, y1) = range(all().map(|p| p.1), chart.log_y);
        let result = match (chart.log_x, chart.log_y) {
            (false, false) => draw(&area, chart, x0..x1, y0..y1, series, mark),
            (true, false) => draw(&area, chart, (x0..x1).log_scale(), y0..y1, series, mark),
            (false, true) => draw(&area, chart, x0..x1, (y0..y1).log_scale(), series, mark),
            (true, true) => draw(
                &area,
                chart,
                (x0..x1).log_scale(),
                (y0..y1).log_scale(),
                series,
                mark,
            ),
        };
        result.map_err(|e| chart.error(e))?;
    }
    Ok(svg)
}

/// Lines through each series' points (in the order given).
pub fn line_chart(chart: &Chart, series: &[Series]) -> Result<String, ReportError> {
    render(chart, series, Mark::Line)
}

/// One small dot per point.
pub fn scatter_chart(chart: &Chart, series: &[Series]) -> Result<String, ReportError> {
    render(chart, series, Mark::Dot)
}

/// One bar per (label, value), labels under the bars.
pub fn bar_chart(chart: &Chart, bars: &[(String, f64)]) -> Result<String, ReportError> {
    let mut svg = String::new();
    {
        let area =
            SVGBackend::with_string(&mut svg, (chart.width, chart.height)).into_drawing_area();
        area.fill(&WHITE).map_err(|e| chart.error(e))?;
        let (_, top) = range(bars.iter().map(|b| b.1), false);
        let n = bars.len().max(1) as f64;
        let x: RangedCoordf64 = (0.0..n).into();
        let mut ctx = ChartBuilder::on(&area)
            .caption(&chart.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x, 0.0..top)
            .map_err(|e| chart.error(e))?;
        let label = |v: &f64| {
            let i = v.floor();
            if (v - i - 0.5).abs() < 1e-6 && (i as usize) < bars.len() {
                bars[i as usize].0.clone()
            } else {
                String::new()
            }
        };
        ctx.configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&label)
            .y_desc(chart.y_label.as_str())
            .x_desc(chart.x_label.as_str())
            .draw()
            .map_err(|e| chart.error(e))?;
        ctx.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            let i = i as f64;
            Rectangle::new(
                [(i + 0.2, 0.0), (i + 0.8, v.max(0.0))],
                color(i as usize).filled(),
            )
        }))
        .map_err(|e| chart.error(e))?;
        area.present().map_err(|e| chart.error(e))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_chart_is_svg_with_title_and_legend() {
        let s = vec![
            Series::new(
                "lru",
                (0..50).map(|i| (f64::from(i), f64::from(i * i))).collect(),
            ),
            Series::new("dscache", vec![(0.0, 1.0), (49.0, 2.0)]),
        ];
        let svg = line_chart(&Chart::new("Cache size", "time (s)", "objects"), &s).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("Cache size") && svg.contains("dscache"));
        assert!(svg.contains("<polyline") || svg.contains("<path"));
    }

    #[test]
    fn log_axes_and_empty_series_do_not_fail() {
        let s = vec![Series::new(
            "mrc",
            vec![(0.0, 0.5), (1.0, 0.4), (1000.0, 0.01)],
        )];
        let chart = Chart::new("MRC", "cache size", "miss ratio")
            .log_x()
            .log_y();
        assert!(line_chart(&chart, &s).unwrap().contains("<svg"));
        assert!(scatter_chart(&Chart::new("empty", "x", "y"), &[]).is_ok());
    }

    #[test]
    fn bar_chart_labels_each_bar() {
        let svg = bar_chart(
            &Chart::new("Memory", "policy", "objects"),
            &[("unlimited".into(), 100.0), ("dscache".into(), 25.0)],
        )
        .unwrap();
        assert!(svg.contains("unlimited") && svg.contains("dscache"));
        assert!(svg.matches("<rect").count() >= 3);
    }
}
