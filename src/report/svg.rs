//! The report's pictures, drawn as inline SVG: no script or style from elsewhere, so the page
//! opens offline. Every function returns one `<svg>` element (or a few, side by side).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// `text` safe inside HTML and SVG text and attributes.
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

/// A time of the window, as an axis label.
pub fn clock(epoch_s: f64) -> String {
    chrono::DateTime::from_timestamp(epoch_s as i64, 0)
        .map_or_else(String::new, |t| t.format("%m-%d %H:%M").to_string())
}

/// Two bars per category: `a` then `b`, each (CSS class, values).
pub fn paired_bars(categories: &[String], a: (&str, &[f64]), b: (&str, &[f64]), y_label: &str) -> String {
    let (host, peers) = (a.1, b.1);
    let (width, height, left, bottom) = (520.0, 180.0, 44.0, 34.0);
    let top = 10.0;
    let plot_h = height - top - bottom;
    let y_max = host.iter().chain(peers).copied().fold(0.0_f64, f64::max).max(1e-9);
    let slot = (width - left - 8.0) / categories.len().max(1) as f64;
    let mut svg = open_svg(width, height, "bars");
    axis_y(&mut svg, left, top, plot_h, y_max, y_label);
    for (i, category) in categories.iter().enumerate() {
        let x = left + i as f64 * slot;
        for (k, (values, class)) in [(host, a.0), (peers, b.0)].into_iter().enumerate() {
            let v = values.get(i).copied().unwrap_or(0.0);
            let h = plot_h * v / y_max;
            let _ = write!(
                svg,
                r#"<rect class="{class}" x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}"><title>{}: {v:.3}</title></rect>"#,
                x + 1.0 + k as f64 * slot * 0.45,
                top + plot_h - h,
                slot * 0.43,
                escape(category),
            );
        }
        if categories.len() <= 10 || i % 2 == 0 {
            let _ = write!(
                svg,
                r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x + slot / 2.0,
                height - bottom + 14.0,
                escape(category)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// (epoch seconds, value) pairs of a time series.
pub type Points = Vec<(f64, f64)>;

/// One series of a chart: its CSS class, its tooltip and its points.
pub struct Line {
    pub class: &'static str,
    pub label: String,
    pub points: Points,
}

/// Time series on one time axis, each a polyline.
pub fn series(t0: f64, t1: f64, lines: &[Line], y_max: f64, y_label: &str) -> String {
    let (width, height, left, bottom, top) = (520.0, 150.0, 44.0, 30.0, 10.0);
    let plot_h = height - top - bottom;
    let span = (t1 - t0).max(1.0);
    let x_of = |t: f64| left + (width - left - 8.0) * (t - t0) / span;
    let mut svg = open_svg(width, height, "series");
    axis_y(&mut svg, left, top, plot_h, y_max, y_label);
    for k in 0..=3 {
        let t = t0 + span * f64::from(k) / 3.0;
        let anchor = ["start", "middle", "middle", "end"][k as usize];
        let _ = write!(
            svg,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="{anchor}">{}</text>"#,
            x_of(t),
            height - bottom + 14.0,
            clock(t)
        );
    }
    for Line { class, label, points } in lines {
        let mut d = String::new();
        for (t, v) in points {
            let _ = write!(d, "{:.1},{:.1} ", x_of(*t), top + plot_h * (1.0 - (v / y_max).clamp(0.0, 1.0)));
        }
        let _ = write!(
            svg,
            r#"<polyline class="{class}" points="{}"><title>{}</title></polyline>"#,
            d.trim_end(),
            escape(label)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// One span of a swimlane: a host was in `state` from `start` to `end` (epoch seconds).
pub struct Span {
    pub host: String,
    pub state: String,
    pub start: f64,
    pub end: f64,
    pub states: i64,
}

/// SALSA's swimlanes: a band per host, a lane per state within it, zoomable along time (the
/// page's script scales the lanes and redraws the time axis; names stay put, in their own
/// column).
pub fn swimlanes(t0: f64, t1: f64, spans: &[Span], marked: &[String]) -> String {
    let mut kinds: Vec<&str> = spans.iter().map(|s| s.state.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut hosts: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for span in spans {
        hosts.entry(span.host.as_str()).or_default().push(span);
    }
    let (lane, gap, width) = (4.0, 4.0, 1000.0);
    let band = lane * kinds.len() as f64 + gap;
    let height = band * hosts.len() as f64;
    let span_s = (t1 - t0).max(1.0);
    let mut names = format!(r#"<svg class="names" width="110" height="{height:.0}" viewBox="0 0 110 {height:.0}">"#);
    let mut lanes = format!(
        r#"<svg class="lanes zoomable" data-t0="{t0}" data-t1="{t1}" width="100%" height="{height:.0}" viewBox="0 0 {width} {height:.0}" preserveAspectRatio="none"><g class="zoom">"#
    );
    for (row, (host, spans)) in hosts.iter().enumerate() {
        let y0 = row as f64 * band;
        let class = if marked.iter().any(|m| m == host) { "host indicted" } else { "host" };
        let _ = write!(
            names,
            r#"<text class="{class}" data-host="{0}" x="106" y="{1:.1}" text-anchor="end">{0}</text>"#,
            escape(host),
            y0 + band / 2.0 + 3.0
        );
        // One path per lane: a span is a few bytes, not an element.
        let mut lanes_of: BTreeMap<usize, (String, i64, usize)> = BTreeMap::new();
        for span in spans {
            let k = kinds.iter().position(|k| *k == span.state).unwrap_or(0);
            let x = width * (span.start - t0) / span_s;
            let w = (width * (span.end - span.start) / span_s).max(0.3);
            let (d, states, count) = lanes_of.entry(k).or_default();
            let _ = write!(d, "M{x:.1} {:.0}h{w:.1}v{lane}h-{w:.1}z", y0 + k as f64 * lane);
            *states += span.states;
            *count += 1;
        }
        for (k, (d, states, count)) in lanes_of {
            let _ = write!(
                lanes,
                r#"<path class="lane-{k}" d="{d}"><title>{} {}: {states} states in {count} spans</title></path>"#,
                escape(host),
                escape(kinds[k]),
            );
        }
    }
    names.push_str("</svg>");
    lanes.push_str("</g></svg>");
    let mut legend = String::from(r#"<div class="legend">"#);
    for (k, kind) in kinds.iter().enumerate() {
        let _ = write!(legend, r#"<span><i class="lane-{k}"></i>{}</span>"#, escape(kind));
    }
    legend.push_str("</div>");
    let mut axis = format!(r#"<div class="axis" data-t0="{t0}" data-t1="{t1}">"#);
    for k in 0..=4 {
        let _ = write!(axis, "<span>{}</span>", clock(t0 + span_s * f64::from(k) / 4.0));
    }
    axis.push_str("</div>");
    format!(r#"{legend}<div class="swimlanes">{names}<div class="lanes-box">{lanes}{axis}</div></div>"#)
}

/// One edge of a graph between nodes, with its weight and what its tooltip says.
pub struct Edge {
    pub src: String,
    pub dst: String,
    pub weight: f64,
    pub label: String,
}

/// Nodes on a circle and the edges between them, wider for more weight; `marked` nodes red.
/// An edge from a node to itself (local I/O) is a ring around the node.
pub fn graph(edges: &[Edge], marked: &[String]) -> String {
    let mut nodes: Vec<&str> = edges.iter().flat_map(|e| [e.src.as_str(), e.dst.as_str()]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let (size, radius) = (520.0, 200.0);
    let centre = size / 2.0;
    let at = |i: usize| {
        let angle = std::f64::consts::TAU * i as f64 / nodes.len().max(1) as f64 - std::f64::consts::FRAC_PI_2;
        (centre + radius * angle.cos(), centre + radius * angle.sin())
    };
    let index = |name: &str| nodes.binary_search(&name).unwrap_or(0);
    let max = edges.iter().map(|e| e.weight).fold(0.0_f64, f64::max).max(1e-9);
    let mut svg = open_svg(size, size, "graph");
    let mut sorted: Vec<&Edge> = edges.iter().collect();
    sorted.sort_by(|a, b| a.weight.total_cmp(&b.weight));
    for edge in sorted {
        let (from, to) = (at(index(&edge.src)), at(index(&edge.dst)));
        let touches = marked.iter().any(|m| *m == edge.src || *m == edge.dst);
        let class = if touches { "edge indicted" } else { "edge" };
        let width = 0.4 + 4.0 * edge.weight / max;
        if edge.src == edge.dst {
            let _ = write!(
                svg,
                r#"<circle class="{class} local" cx="{:.1}" cy="{:.1}" r="11" stroke-width="{width:.2}"><title>{}</title></circle>"#,
                from.0,
                from.1,
                escape(&edge.label)
            );
        } else {
            let _ = write!(
                svg,
                r#"<line class="{class}" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke-width="{width:.2}"><title>{}</title></line>"#,
                from.0,
                from.1,
                to.0,
                to.1,
                escape(&edge.label)
            );
        }
    }
    for (i, name) in nodes.iter().enumerate() {
        let (x, y) = at(i);
        let class = if marked.iter().any(|m| m == name) { "node indicted" } else { "node" };
        let (lx, ly) =
            (centre + (radius + 16.0) * (x - centre) / radius, centre + (radius + 16.0) * (y - centre) / radius);
        let anchor = if lx < centre - 1.0 {
            "end"
        } else if lx > centre + 1.0 {
            "start"
        } else {
            "middle"
        };
        let _ = write!(
            svg,
            r#"<g class="{class}" data-host="{0}"><circle cx="{x:.1}" cy="{y:.1}" r="6"/><text x="{lx:.1}" y="{1:.1}" text-anchor="{anchor}">{0}</text></g>"#,
            escape(name),
            ly + 3.0
        );
    }
    svg.push_str("</svg>");
    svg
}

fn open_svg(width: f64, height: f64, class: &str) -> String {
    format!(r#"<svg class="{class}" width="{width}" height="{height}" viewBox="0 0 {width} {height}">"#)
}

fn axis_y(svg: &mut String, left: f64, top: f64, plot_h: f64, y_max: f64, label: &str) {
    let _ = write!(
        svg,
        r#"<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{0}"/><text class="tick" x="{1}" y="{2}" text-anchor="end">{3}</text><text class="tick" x="{1}" y="{0}" text-anchor="end">0</text><text class="tick" x="2" y="{top}" transform="rotate(90 2 {top})">{4}</text>"#,
        top + plot_h,
        left - 3.0,
        top + 8.0,
        format_value(y_max),
        escape(label),
    );
}

fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cannot_break_out_of_the_markup() {
        assert_eq!(escape(r#"<script>"a'&"#), "&lt;script&gt;&quot;a&#39;&amp;");
        let edges = [Edge { src: "<a>".into(), dst: "b".into(), weight: 1.0, label: "x".into() }];
        assert!(!graph(&edges, &[]).contains("<a>"));
    }

    #[test]
    fn a_graph_marks_the_indicted_node_and_its_edges() {
        let edge =
            |src: &str, dst: &str, weight| Edge { src: src.into(), dst: dst.into(), weight, label: String::new() };
        let svg = graph(&[edge("a", "b", 2.0), edge("b", "c", 1.0), edge("c", "c", 1.0)], &["b".into()]);
        assert_eq!(svg.matches(r#"class="node indicted" data-host="b""#).count(), 1);
        assert_eq!(svg.matches(r#"class="node""#).count(), 2);
        assert_eq!(svg.matches(r#"class="edge indicted""#).count(), 2);
        assert_eq!(svg.matches("local").count(), 1);
    }
}
