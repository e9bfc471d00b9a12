//! Line files the gateway reads back (exports, `history` archives, replay files), one line at
//! a time with a bound on each: a damaged or crafted file (a gzip bomb that decompresses to one
//! endless line) must not make the process allocate without limit.

use std::io::{self, BufRead, Read};

use crate::config::server::MAX_BODY_LIMIT_BYTES;

/// The longest line the gateway ever writes, in bytes. A line holds one body, either as a JSON
/// string, where a control character takes six bytes (`\u0001`), or as base64 (4 bytes for 3),
/// so at most 6 x `MAX_BODY_LIMIT_BYTES` = 6 x 8 MiB = 48 MiB; the rest of the line (provider,
/// event id and type of at most 255 bytes each, escaped, outcome, reason, trace id, numbers,
/// times, field names) is a few KiB, and 64 KiB covers it. 48 MiB + 64 KiB = 50,397,184.
pub const MAX_LINE_BYTES: usize = 6 * MAX_BODY_LIMIT_BYTES + 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("{0}")]
    Read(#[from] io::Error),
    #[error(
        "line {line} is longer than {max} bytes, more than any line the gateway writes: \
         the file is damaged or not an export or archive"
    )]
    TooLong { line: usize, max: usize },
}

/// Reads `reader` line by line, as `BufRead::lines` does (`\n` or `\r\n` ends a line, text must be
/// UTF-8), holding at most [`MAX_LINE_BYTES`] of a line.
pub struct BoundedLines<R> {
    reader: R,
    line: Vec<u8>,
    /// The number of the line last read, from 1.
    number: usize,
    max: usize,
}

impl<R: BufRead> BoundedLines<R> {
    pub fn new(reader: R) -> Self {
        Self::with_max(reader, MAX_LINE_BYTES)
    }

    fn with_max(reader: R, max: usize) -> Self {
        Self {
            reader,
            line: Vec::new(),
            number: 0,
            max,
        }
    }

    /// The next line and its number, without its end; `None` at the end of the input.
    pub fn next_line(&mut self) -> Result<Option<(usize, &str)>, LineError> {
        self.line.clear();
        // One byte more than a line may hold: its `\n`, or the proof that it is too long.
        let room = self.max as u64 + 1;
        let read = (&mut self.reader)
            .take(room)
            .read_until(b'\n', &mut self.line)?;
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
            if self.line.last() == Some(&b'\r') {
                self.line.pop();
            }
        } else if read as u64 == room {
            return Err(LineError::TooLong {
                line: self.number,
                max: self.max,
            });
        }
        let text = std::str::from_utf8(&self.line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line {} is not UTF-8: {e}", self.number),
            )
        })?;
        Ok(Some((self.number, text)))
    }

    pub fn into_inner(self) -> R {
        self.reader
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], max: usize) -> Vec<Result<(usize, String), String>> {
        let mut lines = BoundedLines::with_max(input, max);
        let mut out = Vec::new();
        loop {
            match lines.next_line() {
                Ok(Some((n, text))) => out.push(Ok((n, text.to_owned()))),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    break;
                }
            }
        }
        out
    }

    #[test]
    fn lines_read_as_buf_read_lines_reads_them() {
        assert_eq!(
            all(b"a\r\n\nbc\nd", 8),
            [
                Ok((1, "a".to_owned())),
                Ok((2, String::new())),
                Ok((3, "bc".to_owned())),
                Ok((4, "d".to_owned()))
            ]
        );
        assert_eq!(all(b"", 8), []);
    }

    #[test]
    fn a_line_of_exactly_the_bound_is_read_and_one_byte_more_is_refused_with_its_number() {
        assert_eq!(all(b"1234\n5678", 4).len(), 2);
        let refused = all(b"ok\n12345\n", 4);
        assert_eq!(refused[0], Ok((1, "ok".to_owned())));
        let error = refused[1].as_ref().unwrap_err();
        assert!(error.starts_with("line 2 is longer than"), "{error}");
        // The last line, without its `\n`, is bounded the same.
        assert!(all(b"12345", 4)[0].is_err());
    }

    #[test]
    fn a_line_that_is_not_utf8_is_an_error_naming_it() {
        let error = all(b"ok\n\xff\n", 8)[1].clone().unwrap_err();
        assert!(error.contains("line 2 is not UTF-8"), "{error}");
    }
}
