//! Charts as inline SVG text, for `memlife report --html`: a page that needs no network, no
//! script and no chart library shows the store's history, and every chart is a pure function
//! of its numbers (unit-tested here, no browser needed). Each point and bar carries a `<title>`,
//! so hovering shows its exact value.

use std::fmt::Write;

/// One named line, or one layer of stacked bars: a value per x label (`None`: no data that
/// day, drawn as a gap).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub values: Vec<Option<f64>>,
}

impl Series {
    pub fn new(name: impl Into<String>, values: Vec<Option<f64>>) -> Series {
        Series {
            name: name.into(),
            values,
        }
    }
}

/// Colours that stay apart for the colour-blind (Okabe and Ito), then greys.
const PALETTE: &[&str] = &[
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
    "#777777", "#AAAAAA", "#444444",
];

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 280.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;
/// About how wide one character of an 11 px label is.
const LABEL_CHAR_WIDTH: f64 = 6.5;

/// The colour of the `index`-th series.
pub fn colour(index: usize) -> &'static str {
    PALETTE[index % PALETTE.len()]
}

/// Text made safe inside HTML or SVG.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The smallest "round" number (1, 2 or 5 times a power of ten) at or above `max`; 1 for an
/// empty or zero range, so an all-zero chart still has an axis.
pub fn nice_ceiling(max: f64) -> f64 {
    if !max.is_finite() || max <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|v| *v >= max * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

/// A number as an axis or tooltip shows it: 1.2k, 3.4M, 0.25.
pub fn short_number(value: f64) -> String {
    let magnitude = value.abs();
    let (scaled, suffix) = if magnitude >= 1e9 {
        (value / 1e9, "G")
    } else if magnitude >= 1e6 {
        (value / 1e6, "M")
    } else if magnitude >= 1e3 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    let text = if scaled == scaled.trunc() {
        format!("{scaled:.0}")
    } else if scaled.abs() >= 10.0 {
        format!("{scaled:.1}")
    } else {
        format!("{scaled:.2}")
    };
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// Which x labels are written under the axis: at most `room` of them, evenly spaced, always
/// the first and the last.
pub fn label_positions(count: usize, room: usize) -> Vec<usize> {
    if count == 0 || room == 0 {
        return Vec::new();
    }
    if count <= room {
        return (0..count).collect();
    }
    let step = (count - 1) as f64 / (room.max(2) - 1) as f64;
    let mut picked: Vec<usize> = (0..room.max(2))
        .map(|i| ((i as f64 * step).round() as usize).min(count - 1))
        .collect();
    picked.dedup();
    picked
}

struct Frame {
    y_max: f64,
    count: usize,
}

impl Frame {
    fn plot_width(&self) -> f64 {
        WIDTH - LEFT - RIGHT
    }
    fn plot_height(&self) -> f64 {
        HEIGHT - TOP - BOTTOM
    }
    fn y(&self, value: f64) -> f64 {
        TOP + self.plot_height() * (1.0 - value / self.y_max)
    }
    /// The centre of the `i`-th slot.
    fn x(&self, i: usize) -> f64 {
        let slot = self.plot_width() / self.count.max(1) as f64;
        LEFT + slot * (i as f64 + 0.5)
    }
    fn slot(&self) -> f64 {
        self.plot_width() / self.count.max(1) as f64
    }
}

fn open(svg: &mut String, title: &str, y_unit: &str) {
    let _ = write!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" \
         role=\"img\" aria-label=\"{t}\" font-family=\"sans-serif\" font-size=\"11\">\
         <title>{t}</title>\
         <text x=\"{LEFT}\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{t}</text>\
         <text x=\"4\" y=\"{uy}\" fill=\"#555\">{u}</text>",
        t = escape(title),
        u = escape(y_unit),
        uy = TOP - 8.0,
    );
}

fn axes(svg: &mut String, frame: &Frame, x_labels: &[String]) {
    for step in 0..=4 {
        let value = frame.y_max * step as f64 / 4.0;
        let y = frame.y(value);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{x2}\" y2=\"{y:.1}\" stroke=\"#e3e3e3\"/>\
             <text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\" fill=\"#555\">{v}</text>",
            x2 = WIDTH - RIGHT,
            tx = LEFT - 6.0,
            ty = y + 4.0,
            v = short_number(value),
        );
    }
    let base = frame.y(0.0);
    let _ = write!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{base:.1}\" x2=\"{x2}\" y2=\"{base:.1}\" stroke=\"#888\"/>",
        x2 = WIDTH - RIGHT
    );
    let room = (frame.plot_width() / 80.0).floor() as usize;
    let shown = label_positions(x_labels.len(), room);
    // Labels wider than the space between two shown ones alternate between two rows.
    let widest = shown
        .iter()
        .map(|&i| LABEL_CHAR_WIDTH * x_labels[i].chars().count() as f64)
        .fold(0.0, f64::max);
    let spacing = frame.plot_width() / shown.len().max(1) as f64;
    let stagger = widest > spacing * 0.95;
    for (n, &i) in shown.iter().enumerate() {
        let row = if stagger && n % 2 == 1 { 12.0 } else { 0.0 };
        let _ = write!(
            svg,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" fill=\"#555\">{l}</text>",
            x = frame.x(i),
            y = base + 16.0 + row,
            l = escape(&x_labels[i]),
        );
    }
}

fn legend(svg: &mut String, series: &[Series]) {
    let mut x = LEFT;
    let y = HEIGHT - 10.0;
    for (i, s) in series.iter().enumerate() {
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{ry:.1}\" width=\"10\" height=\"10\" fill=\"{c}\"/>\
             <text x=\"{tx:.1}\" y=\"{y:.1}\">{n}</text>",
            ry = y - 9.0,
            c = colour(i),
            tx = x + 14.0,
            n = escape(&s.name),
        );
        x += 24.0 + LABEL_CHAR_WIDTH * s.name.chars().count() as f64;
    }
}

/// Lines over a shared x axis (days, runs): one polyline per series, broken where a value is
/// missing, with a dot and a tooltip per point.
pub fn line_chart(title: &str, y_unit: &str, x_labels: &[String], series: &[Series]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |m, v| m.max(*v));
    let frame = Frame {
        y_max: nice_ceiling(max),
        count: x_labels.len(),
    };
    let mut svg = String::new();
    open(&mut svg, title, y_unit);
    axes(&mut svg, &frame, x_labels);
    for (index, s) in series.iter().enumerate() {
        let mut runs: Vec<Vec<(usize, f64)>> = vec![Vec::new()];
        for (i, value) in s.values.iter().enumerate().take(frame.count) {
            match value {
                Some(v) => runs.last_mut().expect("one run at least").push((i, *v)),
                None => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| r.len() > 1) {
            let points: Vec<String> = run
                .iter()
                .map(|(i, v)| format!("{:.1},{:.1}", frame.x(*i), frame.y(*v)))
                .collect();
            let _ = write!(
                svg,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{p}\"/>",
                c = colour(index),
                p = points.join(" "),
            );
        }
        for (i, v) in runs.iter().flatten() {
            let _ = write!(
                svg,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.5\" fill=\"{c}\">\
                 <title>{n} {l}: {v}</title></circle>",
                x = frame.x(*i),
                y = frame.y(*v),
                c = colour(index),
                n = escape(&s.name),
                l = escape(&x_labels[*i]),
                v = short_number(*v),
            );
        }
    }
    legend(&mut svg, series);
    svg.push_str("</svg>");
    svg
}

/// Stacked bars, one per x label, a layer per series (missing values count as zero).
pub fn stacked_bar_chart(
    title: &str,
    y_unit: &str,
    x_labels: &[String],
    series: &[Series],
) -> String {
    let totals: Vec<f64> = (0..x_labels.len())
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().flatten().unwrap_or(0.0).max(0.0))
                .sum()
        })
        .collect();
    let frame = Frame {
        y_max: nice_ceiling(totals.iter().copied().fold(0.0, f64::max)),
        count: x_labels.len(),
    };
    let mut svg = String::new();
    open(&mut svg, title, y_unit);
    axes(&mut svg, &frame, x_labels);
    let bar = (frame.slot() * 0.7).max(1.0);
    for (i, label) in x_labels.iter().enumerate().take(frame.count) {
        let mut base = 0.0;
        for (index, s) in series.iter().enumerate() {
            let value = s.values.get(i).copied().flatten().unwrap_or(0.0).max(0.0);
            if value == 0.0 {
                continue;
            }
            let (top, bottom) = (frame.y(base + value), frame.y(base));
            let _ = write!(
                svg,
                "<rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{bar:.1}\" height=\"{h:.1}\" \
                 fill=\"{c}\"><title>{l} {n}: {v}</title></rect>",
                x = frame.x(i) - bar / 2.0,
                h = (bottom - top).max(0.5),
                c = colour(index),
                l = escape(label),
                n = escape(&s.name),
                v = short_number(value),
            );
            base += value;
        }
    }
    legend(&mut svg, series);
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("d{i}")).collect()
    }

    #[test]
    fn ceilings_are_round_and_cover_the_maximum() {
        let cases = [
            (0.0, 1.0),
            (-3.0, 1.0),
            (f64::NAN, 1.0),
            (0.3, 0.5),
            (1.0, 1.0),
            (1.1, 2.0),
            (7.0, 10.0),
            (171.0, 200.0),
            (13_661.0, 20_000.0),
        ];
        for (max, want) in cases {
            let got = nice_ceiling(max);
            assert!((got - want).abs() < 1e-9, "{max}: {got} != {want}");
        }
    }

    #[test]
    fn numbers_shorten_by_magnitude() {
        let cases = [
            (0.0, "0"),
            (12.0, "12"),
            (0.25, "0.25"),
            (1500.0, "1.5k"),
            (20_000.0, "20k"),
            (203_000_000.0, "203M"),
            (2.5e9, "2.5G"),
        ];
        for (value, want) in cases {
            assert_eq!(short_number(value), want, "{value}");
        }
    }

    #[test]
    fn labels_keep_first_and_last_within_room() {
        assert_eq!(label_positions(3, 8), vec![0, 1, 2]);
        let picked = label_positions(182, 8);
        assert_eq!(picked.len(), 8);
        assert_eq!((picked[0], *picked.last().unwrap()), (0, 181));
        assert!(label_positions(0, 8).is_empty());
    }

    /// The distinct heights of the x labels (text drawn centred under the axis).
    fn label_rows(svg: &str) -> std::collections::BTreeSet<String> {
        let marker = "\" text-anchor=\"middle\"";
        svg.match_indices(marker)
            .map(|(at, _)| {
                let before = &svg[..at];
                before[before.rfind("y=\"").unwrap() + 3..].to_string()
            })
            .collect()
    }

    #[test]
    fn long_labels_alternate_between_two_rows() {
        let names: Vec<String> = (0..11).map(|i| format!("memory_entities_{i}")).collect();
        let svg = stacked_bar_chart("storage", "MB", &names, &[]);
        assert_eq!(label_rows(&svg).len(), 2, "{svg}");
        let short = stacked_bar_chart("days", "n", &labels(5), &[]);
        assert_eq!(label_rows(&short).len(), 1, "{short}");
    }

    #[test]
    fn text_is_escaped_everywhere() {
        let series = [Series::new("<hot & \"new\">", vec![Some(1.0), Some(2.0)])];
        let svg = line_chart("a < b", "n", &labels(2), &series);
        assert!(!svg.contains("<hot"), "{svg}");
        assert!(svg.contains("&lt;hot &amp; &quot;new&quot;&gt;"));
        assert!(svg.contains("a &lt; b"));
    }

    #[test]
    fn a_gap_breaks_the_line_and_every_value_has_a_tooltip() {
        let series = [Series::new(
            "hot",
            vec![Some(1.0), Some(2.0), None, Some(4.0), Some(5.0)],
        )];
        let svg = line_chart("tiers", "memories", &labels(5), &series);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 4);
        assert!(svg.contains("<title>hot d3: 4</title>"));
        assert!(svg.ends_with("</svg>"));
    }

    #[test]
    fn stacked_bars_share_one_scale_and_skip_zero_layers() {
        let series = [
            Series::new("folded", vec![Some(3.0), Some(0.0)]),
            Series::new("superseded", vec![Some(5.0), None]),
        ];
        let svg = stacked_bar_chart("effects", "memories", &labels(2), &series);
        // 3 + 5 = 8 rounds up to a 10 axis; the zero and missing layers draw nothing.
        assert!(svg.contains(">10</text>"), "{svg}");
        assert_eq!(
            svg.matches("<rect x=").count(),
            2 + 2,
            "two bars, two legend keys"
        );
        assert!(svg.contains("<title>d0 superseded: 5</title>"));
    }
}
