//! Wildcard matching of byte strings: the one matcher behind class rules' `key_glob:` and the
//! server's CONFIG GET patterns.

/// Whether `text` matches `pattern`: `*` matches any run of bytes, `?` any one byte, every
/// other byte itself. Linear space and no allocation: the greedy matcher that backtracks to
/// the last `*`. A `*` in the pattern is always a wildcard, even where the text has a `*`.
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn stars_and_question_marks() {
        assert!(glob_match(b"user:*", b"user:42"));
        assert!(glob_match(b"*:42", b"user:42"));
        assert!(glob_match(b"u?er*4?", b"user:42"));
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"", b""));
        assert!(glob_match(b"*memory*", b"maxmemory-policy"));
        assert!(!glob_match(b"user:?", b"user:42"));
        assert!(!glob_match(b"a*b", b"acbd"));
        assert!(glob_match(b"a*b*c", b"aXbYbZc"));
        assert!(!glob_match(b"max", b"maxmemory"));
        assert!(!glob_match(b"*x", b"maxmemory"));
    }

    /// A `*` in the text must not be taken for the pattern's wildcard: the class-rule copy of
    /// this matcher compared literally first and answered false here.
    #[test]
    fn a_star_in_the_text_is_an_ordinary_byte() {
        assert!(glob_match(b"*b", b"*ab"));
        assert!(glob_match(b"a*", b"a*"));
        assert!(!glob_match(b"?", b""));
    }
}
