//! A cursor over a request's arguments that commands use to read themselves, so every
//! command reports missing, extra and malformed arguments with the same Redis-style errors.

use bytes::Bytes;
use std::fmt;

/// Why a command's arguments were rejected; becomes an `-ERR` reply, never a closed connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Too few or too many arguments.
    Arity,
    Syntax,
    NotInteger,
    /// Anything else, with the full message (without the `ERR ` prefix).
    Other(String),
}

pub struct Parse<'a> {
    args: &'a [Bytes],
    pos: usize,
}

impl<'a> Parse<'a> {
    /// A cursor over `args`, positioned after the command name (`args[0]`).
    pub fn new(args: &'a [Bytes]) -> Parse<'a> {
        Parse { args, pos: 1 }
    }

    pub fn remaining(&self) -> usize {
        self.args.len().saturating_sub(self.pos)
    }

    pub fn next_bytes(&mut self) -> Result<Bytes, ParseError> {
        let arg = self.args.get(self.pos).ok_or(ParseError::Arity)?;
        self.pos += 1;
        Ok(arg.clone())
    }

    /// The next argument, borrowed for as long as the request's arguments.
    pub fn next_slice(&mut self) -> Result<&'a [u8], ParseError> {
        let arg = self.args.get(self.pos).ok_or(ParseError::Arity)?;
        self.pos += 1;
        Ok(arg)
    }

    pub fn next_optional(&mut self) -> Option<Bytes> {
        self.next_bytes().ok()
    }

    /// The next argument as UTF-8 text (for names and keywords).
    pub fn next_string(&mut self) -> Result<String, ParseError> {
        let arg = self.next_bytes()?;
        String::from_utf8(arg.to_vec()).map_err(|_| ParseError::Syntax)
    }

    pub fn next_int(&mut self) -> Result<i64, ParseError> {
        let arg = self.next_bytes()?;
        std::str::from_utf8(&arg)
            .ok()
            .and_then(|text| text.parse::<i64>().ok())
            .ok_or(ParseError::NotInteger)
    }

    /// Everything left, consumed.
    pub fn rest(&mut self) -> &'a [Bytes] {
        let rest = self.args.get(self.pos..).unwrap_or(&[]);
        self.pos = self.args.len();
        rest
    }

    /// Fails if arguments are left over.
    pub fn finish(&self) -> Result<(), ParseError> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(ParseError::Arity)
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Arity => f.write_str("wrong number of arguments"),
            ParseError::Syntax => f.write_str("syntax error"),
            ParseError::NotInteger => f.write_str("value is not an integer or out of range"),
            ParseError::Other(message) => f.write_str(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reads_in_order_and_checks_the_end() {
        let args: Vec<Bytes> = ["SET", "k", "12", "x"]
            .iter()
            .map(|s| Bytes::from(s.to_string()))
            .collect();
        let mut parse = Parse::new(&args);
        assert_eq!(parse.next_bytes().unwrap(), "k");
        assert_eq!(parse.next_slice().unwrap(), b"12");
        parse.pos -= 1;
        assert_eq!(parse.next_int().unwrap(), 12);
        assert_eq!(parse.finish(), Err(ParseError::Arity));
        assert_eq!(parse.next_int(), Err(ParseError::NotInteger));
        assert_eq!(parse.next_bytes(), Err(ParseError::Arity));
        assert!(parse.finish().is_ok());
    }
}
