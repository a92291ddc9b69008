//! The page itself: the template, its style and script (files beside this one, compiled in),
//! and the run's data as JSON escaped so that nothing in it can end its script element.

use crate::report::Report;

const TEMPLATE: &str = include_str!("page.html");
const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// The page of `report`, with `extra` (the timeline, the groups, the diffs, the land record,
/// as JSON) beside it.
pub(super) fn page(report: &Report, extra: &[u8]) -> serde_json::Result<Vec<u8>> {
    let mut data = b"{\"report\":".to_vec();
    data.extend(serde_json::to_vec(report)?);
    data.extend(b",\"extra\":");
    data.extend(extra);
    data.push(b'}');
    // The page holds no secret, as no file of swarm's does (docs/SECURITY.md).
    let data = crate::secrets::redact_bytes(&data).into_owned();
    let title = format!("swarm run {}", report.run_id);
    Ok(fill(&[
        ("{{TITLE}}", &text(&title)),
        ("{{STYLE}}", STYLE),
        ("{{DATA}}", &in_script(&String::from_utf8_lossy(&data))),
        ("{{SCRIPT}}", SCRIPT),
    ])
    .into_bytes())
}

/// The template with each marker replaced once, in order: the template is cut at its markers
/// before anything is put in, so nothing put in is ever read as a marker.
fn fill(parts: &[(&str, &str)]) -> String {
    let mut page =
        String::with_capacity(TEMPLATE.len() + parts.iter().map(|p| p.1.len()).sum::<usize>());
    let mut rest = TEMPLATE;
    for (marker, value) in parts {
        let (before, after) = rest
            .split_once(marker)
            .unwrap_or_else(|| panic!("page.html has no {marker}"));
        page.push_str(before);
        page.push_str(value);
        rest = after;
    }
    page.push_str(rest);
    page
}

/// `s` as HTML text.
fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JSON made safe inside `<script type="application/json">`: `<`, `>`, `&` and the two line
/// separators JavaScript reads as line ends appear only inside JSON strings, where their
/// `\u` escapes mean the same, so `</script>` or `<!--` in any value cannot end the element.
fn in_script(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + json.len() / 16);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_in_the_data_can_close_its_script_or_be_read_as_a_marker() {
        let json = r#"{"a":"</script><script>alert(1)</script><!--","b":"{{SCRIPT}}"}"#;
        let safe = in_script(json);
        assert!(!safe.contains('<') && !safe.contains('>'));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["a"], "</script><script>alert(1)</script><!--");
        let page = fill(&[
            ("{{TITLE}}", &text("<b>{{DATA}}</b>")),
            ("{{STYLE}}", ""),
            ("{{DATA}}", &safe),
            ("{{SCRIPT}}", "/*script*/"),
        ]);
        assert_eq!(page.matches("/*script*/").count(), 1);
        assert!(page.contains("&lt;b&gt;{{DATA}}&lt;/b&gt;"));
        assert!(page.contains("\"b\":\"{{SCRIPT}}\""));
    }
}
