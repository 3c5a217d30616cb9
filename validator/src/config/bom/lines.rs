//! Where in the BOM's text a problem is: the line of an offset, the line of a key (from
//! the TOML parser's spans), and a parser message made readable (control characters
//! TOML refuses are named).
//!
//! Contract: never fails - a key that is not in the text (a default) gets the line of
//! the nearest enclosing key or table, else line 1.

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()
        .get(..offset.min(text.len()))
        .unwrap_or_default()
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

/// What is wrong at `offset`: a control character TOML does not allow is named (the
/// parser's own message for it can be empty or about something else), otherwise the
/// parser's message on one line.
pub(super) fn parse_message(text: &str, offset: Option<usize>, message: &str) -> String {
    let rest = offset.and_then(|o| text.get(o..)).unwrap_or_default();
    let mut chars = rest.chars();
    match (chars.next(), chars.next()) {
        (Some('\0'), _) => "a NUL character, which TOML does not allow".into(),
        (Some('\r'), next) if next != Some('\n') => {
            "a carriage return without a line feed (TOML lines end in LF or CRLF)".into()
        }
        (Some(c), _) if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => format!(
            "control character U+{:04X}, which TOML does not allow",
            u32::from(c)
        ),
        _ if message.trim().is_empty() => "not valid TOML".into(),
        _ => message.trim().lines().collect::<Vec<_>>().join("; "),
    }
}

/// Lines of keys in the BOM text, from the TOML parser's spans.
pub(super) struct KeyLines<'a> {
    text: &'a str,
    /// The text parsed again with its spans, on the first question: only a BOM with a
    /// problem is asked about, so a good one is parsed once.
    doc: std::cell::OnceCell<Option<toml_edit::ImDocument<&'a str>>>,
}

impl<'a> KeyLines<'a> {
    pub(super) fn new(text: &'a str) -> KeyLines<'a> {
        KeyLines {
            text,
            doc: std::cell::OnceCell::new(),
        }
    }

    /// The line of the key at `path` (or of element `index` of its array value); where
    /// that is not in the text (a default), the line of the nearest enclosing key or
    /// table, else 1.
    pub(super) fn of(&self, path: &[&str], index: Option<usize>) -> usize {
        let doc = self
            .doc
            .get_or_init(|| toml_edit::ImDocument::parse(self.text).ok());
        let Some(doc) = doc else { return 1 };
        let mut item = doc.as_item();
        let mut span = None;
        let mut complete = true;
        for key in path {
            let Some((k, v)) = item.as_table_like().and_then(|t| t.get_key_value(key)) else {
                complete = false;
                break;
            };
            span = k.span().or(span);
            item = v;
        }
        if let (true, Some(i)) = (complete, index) {
            if let Some(v) = item.as_array().and_then(|a| a.get(i)) {
                span = v.span().or(span);
            }
        }
        span.map_or(1, |s| line_of(self.text, s.start))
    }

    /// The line of key `key` of the map at `path`.
    pub(super) fn of_key(&self, path: &[&str], key: &str) -> usize {
        let mut p = path.to_vec();
        p.push(key);
        self.of(&p, None)
    }
}
