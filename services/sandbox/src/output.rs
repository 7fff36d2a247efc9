//! The console buffer and the output cap.

use crate::RunOutput;

/// Console lines as the script writes them; keeps at most `cap` bytes and counts
/// the rest, so a chatty script cannot use the host's memory.
#[derive(Debug)]
pub(crate) struct Console {
    text: String,
    cap: usize,
    dropped: usize,
}

impl Console {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            dropped: 0,
        }
    }

    /// Appends `line` and a newline, as far as the cap allows.
    pub(crate) fn push_line(&mut self, line: &str) {
        let room = self.cap.saturating_sub(self.text.len());
        let needed = line.len() + 1;
        if needed <= room {
            self.text.push_str(line);
            self.text.push('\n');
        } else {
            let kept = floor_char_boundary(line, room);
            self.text.push_str(&line[..kept]);
            self.dropped += needed - kept;
        }
    }
}

/// Fits the return value JSON and the console into `cap` bytes: the value first
/// (cut to a string with a note if its JSON alone is over the cap), the console in
/// what is left (cut with a note).
pub(crate) fn assemble(
    value_json: &str,
    console: Console,
    tool_calls: u32,
    cap: usize,
) -> RunOutput {
    let mut truncated = false;
    let value = if value_json.len() > cap {
        truncated = true;
        let kept = floor_char_boundary(value_json, cap);
        serde_json::Value::String(format!(
            "{}… [return value truncated: its JSON has {} bytes, the limit is {cap}]",
            &value_json[..kept],
            value_json.len()
        ))
    } else {
        match serde_json::from_str(value_json) {
            Ok(value) => value,
            // The JSON came from JSON.stringify; this only happens for documents
            // serde_json refuses (nesting deeper than 128), which are reported as text.
            Err(e) => serde_json::Value::String(format!(
                "[return value not representable: {e}] {value_json}"
            )),
        }
    };
    let budget = cap.saturating_sub(value_json.len().min(cap));
    let Console {
        mut text, dropped, ..
    } = console;
    let mut omitted = dropped;
    if text.len() > budget {
        let kept = floor_char_boundary(&text, budget);
        omitted += text.len() - kept;
        text.truncate(kept);
    }
    if omitted > 0 {
        truncated = true;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!(
            "… [console output truncated: {omitted} more bytes; the output limit is {cap} bytes]\n"
        ));
    }
    RunOutput {
        value,
        console: text,
        tool_calls,
        truncated,
    }
}

/// The largest index `<= at` that is on a char boundary of `s`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    (0..=at).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_within_cap_is_kept_whole() {
        let mut console = Console::new(100);
        console.push_line("a");
        console.push_line("bc");
        let out = assemble("1", console, 0, 100);
        assert_eq!(out.console, "a\nbc\n");
        assert!(!out.truncated);
    }

    #[test]
    fn console_over_cap_is_cut_with_a_note() {
        let mut console = Console::new(10);
        console.push_line("0123456789abcdef");
        let out = assemble("null", console, 0, 10);
        assert!(out.truncated);
        assert!(out.console.starts_with("012345\n"), "{}", out.console);
        assert!(
            out.console.contains("console output truncated"),
            "{}",
            out.console
        );
    }

    #[test]
    fn oversized_value_becomes_a_cut_string() {
        let json = format!("\"{}\"", "é".repeat(20));
        let out = assemble(&json, Console::new(8), 0, 8);
        assert!(out.truncated);
        let text = out.value.as_str().unwrap_or_default();
        assert!(text.contains("return value truncated"), "{text}");
    }
}
