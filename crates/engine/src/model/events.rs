//! Server-sent events (the WHATWG `text/event-stream` format) read from bytes as they come:
//! each event's `data:` lines joined with newlines, dispatched at the blank line that ends
//! it; comments (`:`), `event:`, `id:` and `retry:` skipped; `\n`, `\r\n` line ends. Each
//! byte is looked at once, however the stream is cut into chunks, and a line longer than the
//! cap is dropped (and said), so memory stays bounded. Used by the model client's stream and
//! by the gateway's meter.

/// Splits a byte stream into events' data.
#[derive(Debug)]
pub(crate) struct EventDecoder {
    /// The line being read (without its end).
    line: Vec<u8>,
    /// Dropping the rest of a line that went over `cap`.
    skipping: bool,
    /// The data of the event being read, and whether it has a `data:` field yet.
    data: Vec<u8>,
    has_data: bool,
    cap: usize,
    overflowed: bool,
}

impl EventDecoder {
    /// A decoder that drops lines longer than `cap` bytes.
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            line: Vec::new(),
            skipping: false,
            data: Vec::new(),
            has_data: false,
            cap,
            overflowed: false,
        }
    }

    /// Reads `bytes`; calls `on_event` with the data of each event they complete.
    pub(crate) fn feed(&mut self, bytes: &[u8], on_event: &mut dyn FnMut(&[u8])) {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !self.skipping && self.line.len() + end > self.cap {
                self.overflowed = true;
            } else if !self.skipping {
                self.line.extend_from_slice(&rest[..end]);
                let line = std::mem::take(&mut self.line);
                self.field(&line, on_event);
                self.line = line;
            }
            self.line.clear();
            self.skipping = false;
            rest = &rest[end + 1..];
        }
        if self.skipping {
            return;
        }
        if self.line.len() + rest.len() > self.cap {
            self.overflowed = true;
            self.skipping = true;
            self.line.clear();
        } else {
            self.line.extend_from_slice(rest);
        }
    }

    /// The stream ended: a last line without its end, an event without its blank line.
    pub(crate) fn finish(&mut self, on_event: &mut dyn FnMut(&[u8])) {
        if !self.skipping && !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.field(&line, on_event);
        }
        self.dispatch(on_event);
    }

    /// Whether a line was dropped for being over the cap.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn field(&mut self, line: &[u8], on_event: &mut dyn FnMut(&[u8])) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        if name != b"data" {
            // A comment (empty name), `event`, `id`, `retry`.
            return;
        }
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if self.has_data {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
        self.has_data = true;
    }

    fn dispatch(&mut self, on_event: &mut dyn FnMut(&[u8])) {
        if self.has_data {
            on_event(&self.data);
        }
        self.data.clear();
        self.has_data = false;
    }
}

/// The JSON documents of one event's data: the whole data, or — from a server that puts one
/// document per `data:` line without blank lines between them — each line.
pub(crate) fn documents(data: &[u8]) -> Vec<serde_json::Result<serde_json::Value>> {
    match serde_json::from_slice(data) {
        Ok(value) => vec![Ok(value)],
        Err(e) if !data.contains(&b'\n') => vec![Err(e)],
        Err(_) => data
            .split(|&b| b == b'\n')
            .filter(|l| !l.trim_ascii().is_empty())
            .map(serde_json::from_slice)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]], cap: usize) -> (Vec<String>, bool) {
        let mut d = EventDecoder::new(cap);
        let mut out = Vec::new();
        let mut push = |e: &[u8]| out.push(String::from_utf8_lossy(e).into_owned());
        for c in chunks {
            d.feed(c, &mut push);
        }
        d.finish(&mut push);
        (out, d.overflowed())
    }

    #[test]
    fn events_are_joined_and_split_as_the_spec_says() {
        let stream = b": keep-alive\r\nevent: delta\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nid: 7\ndata:two\n\ndata: [DONE]\n\n";
        let (whole, _) = events(&[stream], 1024);
        assert_eq!(whole, ["{\"a\":\n1}", "two", "[DONE]"]);
        // Cut anywhere, the same events.
        for cut in 1..stream.len() {
            let (parts, _) = events(&[&stream[..cut], &stream[cut..]], 1024);
            assert_eq!(parts, whole, "cut at {cut}");
        }
        // The last event without its blank line, at the end of the stream.
        assert_eq!(events(&[b"data: x"], 1024).0, ["x"]);
    }

    #[test]
    fn an_overlong_line_is_dropped_and_said() {
        let long = format!("data: {}\n\ndata: ok\n\n", "x".repeat(100));
        let (got, overflowed) = events(&[long.as_bytes()], 50);
        assert_eq!(got, ["ok"]);
        assert!(overflowed);
        // Fed a byte at a time, too (a long line never grows past the cap).
        let bytes: Vec<&[u8]> = long.as_bytes().chunks(1).collect();
        assert_eq!(events(&bytes, 50), (vec!["ok".to_string()], true));
    }

    #[test]
    fn documents_of_one_event() {
        assert_eq!(documents(b"{\"a\":\n1}").len(), 1);
        let two = documents(b"{\"a\":1}\n{\"b\":2}");
        assert_eq!(two.len(), 2);
        assert!(two.iter().all(|d| d.is_ok()));
    }
}
