//! The parser of the header's Python literal: the subset NumPy writes (a dictionary of strings,
//! booleans, non-negative integers, tuples and lists), with byte offsets for errors.

use super::NpyError;

/// Nesting depth allowed in the header literal (NumPy's headers nest two levels).
const MAX_DEPTH: usize = 16;

/// The subset of Python literals NumPy writes in a header.
pub(super) enum Lit {
    Str(String),
    Bool(bool),
    Int(u64),
    None,
    Tuple(Vec<Lit>),
    /// A list (its items are parsed, then dropped: only a structured `descr` is a list).
    List,
    /// (key, offset of the value, value)
    Dict(Vec<(String, u64, Lit)>),
}

pub(super) struct Parser<'a> {
    pub(super) s: &'a [u8],
    pub(super) pos: usize,
    pub(super) base: u64,
}

impl Parser<'_> {
    pub(super) fn offset(&self) -> u64 {
        header_offset(self.base, self.pos)
    }

    /// Moves past the current byte (never past the end of the text).
    #[expect(
        clippy::arithmetic_side_effects,
        reason = "pos < s.len() <= isize::MAX, checked just before the increment"
    )]
    fn bump(&mut self) {
        if self.pos < self.s.len() {
            self.pos += 1;
        }
    }

    pub(super) fn err(&self, why: &str) -> NpyError {
        NpyError::malformed(self.offset(), format!("header: {why}"))
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    pub(super) fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.bump();
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.bump();
            true
        } else {
            false
        }
    }

    pub(super) fn value(&mut self, depth: usize) -> Result<Lit, NpyError> {
        let inner = match depth.checked_add(1) {
            Some(inner) if depth <= MAX_DEPTH => inner,
            _ => return Err(self.err("nested too deeply")),
        };
        self.skip_ws();
        match self.peek() {
            Some(b'{') => {
                self.bump();
                let mut entries = Vec::new();
                loop {
                    if self.eat(b'}') {
                        break;
                    }
                    self.skip_ws();
                    let Lit::Str(key) = self.value(inner)? else {
                        return Err(self.err("dictionary key is not a string"));
                    };
                    if !self.eat(b':') {
                        return Err(self.err("expected ':'"));
                    }
                    self.skip_ws();
                    let at = self.offset();
                    let v = self.value(inner)?;
                    if entries.iter().any(|(k, _, _)| *k == key) {
                        return Err(NpyError::malformed(at, format!("duplicate key {key:?}")));
                    }
                    entries.push((key, at, v));
                    if !self.eat(b',') {
                        if self.eat(b'}') {
                            break;
                        }
                        return Err(self.err("expected ',' or '}'"));
                    }
                }
                Ok(Lit::Dict(entries))
            }
            Some(open @ (b'(' | b'[')) => {
                self.bump();
                let close = if open == b'(' { b')' } else { b']' };
                let mut items = Vec::new();
                let mut had_comma = false;
                loop {
                    if self.eat(close) {
                        break;
                    }
                    items.push(self.value(inner)?);
                    had_comma = self.eat(b',');
                    if !had_comma {
                        if self.eat(close) {
                            break;
                        }
                        return Err(self.err("expected ',' or a closing bracket"));
                    }
                }
                if open == b'(' && items.len() == 1 && !had_comma {
                    // `(x)` is just x in Python.
                    return items.pop().ok_or_else(|| self.err("empty parenthesis"));
                }
                Ok(if open == b'(' {
                    Lit::Tuple(items)
                } else {
                    Lit::List
                })
            }
            Some(q @ (b'\'' | b'"')) => {
                self.bump();
                let mut out = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err("unterminated string")),
                        Some(c) if c == q => {
                            self.bump();
                            break;
                        }
                        Some(b'\\') => {
                            self.bump();
                            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
                            out.push(c);
                            self.bump();
                        }
                        Some(c) => {
                            out.push(c);
                            self.bump();
                        }
                    }
                }
                String::from_utf8(out)
                    .map(Lit::Str)
                    .map_err(|_| self.err("string is not valid UTF-8"))
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.bump();
                }
                let digits = std::str::from_utf8(self.s.get(start..self.pos).unwrap_or_default())
                    .unwrap_or_default();
                let n = digits
                    .parse::<u64>()
                    .map_err(|_| self.err("integer does not fit in 64 bits"))?;
                // Python 2 wrote long integers with an `L` suffix.
                if matches!(self.peek(), Some(b'L' | b'l')) {
                    self.bump();
                }
                Ok(Lit::Int(n))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.bump();
                }
                match self.s.get(start..self.pos) {
                    Some(b"True") => Ok(Lit::Bool(true)),
                    Some(b"False") => Ok(Lit::Bool(false)),
                    Some(b"None") => Ok(Lit::None),
                    _ => {
                        self.pos = start;
                        Err(self.err("unexpected name (True, False or None expected)"))
                    }
                }
            }
            Some(b'-') => Err(self.err("negative number")),
            Some(_) => Err(self.err("unexpected character")),
            None => Err(self.err("unexpected end of header")),
        }
    }
}

/// The file offset of byte `i` of a header text starting at `text_start`, for errors.
#[expect(
    clippy::arithmetic_side_effects,
    reason = "text_start <= 12 and i <= the header text's length <= MAX_HEADER_BYTES (2^20), \
              bounded in prefix_fields"
)]
pub(super) fn header_offset(text_start: u64, i: usize) -> u64 {
    text_start + i as u64
}
