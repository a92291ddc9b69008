//! Text swarm did not write, made safe to show: a worker's output, a model's or an agent's
//! summary, a file name from the repository, a plan file's instruction. Control characters
//! (an `ESC]0;…BEL` that sets the window title, an `ESC[2J` that clears the screen, a lone
//! carriage return that overwrites the line) are shown in caret notation, as `cat -v`
//! shows them (`^[]0;title^G`), and C1 controls as `\u{9b}`; newlines and tabs stay.
//!
//! Applied where reports and events reach the terminal (the renderers, `swarm status`,
//! GitHub Actions' log and step summary) and to every error message, so no producer has to
//! remember it. The JSON outputs (`--json`, report.json, events.jsonl) keep the text as it
//! was: JSON escapes control characters itself.

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// `text` with its control characters made visible.
pub(crate) fn text(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // A line ending written by a Windows program is a line ending.
            '\r' if chars.peek() == Some(&'\n') => {}
            c if !is_hidden(c) => out.push(c),
            '\u{7f}' => out.push_str("^?"),
            c if (c as u32) < 0x20 => {
                out.push('^');
                out.push(char::from(b'@' + c as u8));
            }
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// A character a terminal would act on rather than show.
fn is_hidden(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `value` (a report, an event) with every string in it made visible; `None` when nothing
/// needed it.
pub(crate) fn value<T: Serialize + DeserializeOwned>(value: &T) -> Option<T> {
    // Most values hold no control character: JSON text tells cheaply (it escapes C0 ones).
    let text = serde_json::to_string(value).ok()?;
    let suspect = ["\\u00", "\\r", "\\b", "\\f", "\u{7f}"]
        .iter()
        .any(|s| text.contains(s))
        || text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c));
    if !suspect {
        return None;
    }
    let mut json: serde_json::Value = serde_json::from_str(&text).ok()?;
    if !walk(&mut json) {
        return None;
    }
    serde_json::from_value(json).ok()
}

/// Makes every string in `json` visible; whether any changed.
fn walk(json: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match json {
        Value::String(s) => match text(s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(shown) => {
                *s = shown;
                true
            }
        },
        Value::Array(items) => items.iter_mut().fold(false, |any, v| walk(v) | any),
        Value::Object(map) => map.values_mut().fold(false, |any, v| walk(v) | any),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_as_cat_v_would() {
        assert_eq!(text("plain\ttext\nnext"), "plain\ttext\nnext");
        assert_eq!(text("\x1b]0;pwned\x07"), "^[]0;pwned^G");
        assert_eq!(text("\x1b[2Jcleared"), "^[[2Jcleared");
        assert_eq!(text("windows\r\nline"), "windows\nline");
        assert_eq!(text("over\rwrite"), "over^Mwrite");
        assert_eq!(text("\u{9b}31m \u{7f}"), "\\u{9b}31m ^?");
    }

    #[test]
    fn every_string_of_a_value() {
        let v = serde_json::json!({"a": ["ok", "\x1b[2J"], "b": {"c": "\x07"}, "n": 1});
        let shown = value(&v).unwrap();
        assert_eq!(
            shown,
            serde_json::json!({"a": ["ok", "^[[2J"], "b": {"c": "^G"}, "n": 1})
        );
        assert!(value(&serde_json::json!({"a": "fine"})).is_none());
    }
}
