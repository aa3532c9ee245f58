//! A pre-scan of policy source text before Lua compiles it. Compiling is not metered (the
//! count hook does not run in the parser), and Lua's compiler is quadratic in a few
//! constructs: every `and`/`or` of one expression and every `elseif` of one `if` joins a
//! jump list that is walked to its end each time, and each label is checked against every
//! label before it and each pending `goto` against every label. A 1 MiB chain of `or` took
//! 44 s to compile. Counting those tokens over the whole chunk bounds every such chain, so a
//! chunk that passes compiles in time linear in its size plus at most
//! [`MAX_CHAIN_TOKENS`] squared small steps (measured in docs/policy-language.md).
//!
//! The scan is a small lexer: strings and comments are skipped so that prose in them is
//! not counted. It only counts; Lua's own parser still reports every syntax error.

/// `and`, `or`, `elseif`, `goto` and `::` tokens a chunk may hold. A policy needs a few
/// dozen; at this bound the worst chain compiles in well under a second.
pub const MAX_CHAIN_TOKENS: usize = 10_000;

/// Refuses a chunk whose compile time could be quadratic in its length.
pub fn check_compile_cost(chunk_name: &str, source: &[u8]) -> Result<(), String> {
    let count = chain_tokens(source);
    if count > MAX_CHAIN_TOKENS {
        return Err(format!(
            "{}: the source holds {count} `and`/`or`/`elseif`/`goto`/label tokens; at most \
             {MAX_CHAIN_TOKENS} are accepted (Lua compiles long chains of them in quadratic time)",
            display_name(chunk_name)
        ));
    }
    Ok(())
}

/// Lua's chunk names start with `=` or `@` when they are to be shown as they are.
fn display_name(chunk_name: &str) -> &str {
    chunk_name
        .strip_prefix('=')
        .or_else(|| chunk_name.strip_prefix('@'))
        .unwrap_or(chunk_name)
}

fn chain_tokens(src: &[u8]) -> usize {
    let mut count = 0;
    let mut i = 0;
    while i < src.len() {
        let c = src[i];
        i = match c {
            b'-' if src.get(i + 1) == Some(&b'-') => skip_comment(src, i + 2),
            b'"' | b'\'' => skip_quoted(src, i + 1, c),
            b'[' => match long_bracket_level(src, i) {
                Some(level) => skip_long(src, i, level),
                None => i + 1,
            },
            b':' if src.get(i + 1) == Some(&b':') => {
                count += 1;
                i + 2
            }
            b'0'..=b'9' => skip_while(src, i, |b| b.is_ascii_alphanumeric() || b == b'.'),
            b if b.is_ascii_alphabetic() || b == b'_' => {
                let end = skip_while(src, i, |b| b.is_ascii_alphanumeric() || b == b'_');
                if matches!(&src[i..end], b"and" | b"or" | b"elseif" | b"goto") {
                    count += 1;
                }
                end
            }
            _ => i + 1,
        };
    }
    count
}

/// `src` with each comment replaced by a space (strings kept whole, so a `--` inside one
/// stays): what a scan for the names a file uses should read, as a word in a comment is
/// not a use.
pub(crate) fn without_comments(src: &str) -> String {
    let bytes = src.as_bytes();
    let mut code = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let end = match c {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = skip_comment(bytes, i + 2);
                code.push(b' ');
                continue;
            }
            b'"' | b'\'' => skip_quoted(bytes, i + 1, c),
            b'[' => long_bracket_level(bytes, i).map_or(i + 1, |level| skip_long(bytes, i, level)),
            _ => i + 1,
        };
        let end = end.min(bytes.len());
        code.extend_from_slice(&bytes[i..end]);
        i = end;
    }
    // Cut only at ASCII bytes (comment delimiters, quotes, brackets): still UTF-8.
    String::from_utf8(code).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn skip_while(src: &[u8], mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
    while i < src.len() && keep(src[i]) {
        i += 1;
    }
    i
}

/// After `--`: a long comment or the rest of the line.
fn skip_comment(src: &[u8], i: usize) -> usize {
    match long_bracket_level(src, i) {
        Some(level) => skip_long(src, i, level),
        None => skip_while(src, i, |b| b != b'\n'),
    }
}

/// From just after the opening quote to just after the closing one (or the line's end,
/// where Lua reports an unfinished string).
fn skip_quoted(src: &[u8], mut i: usize, quote: u8) -> usize {
    while i < src.len() {
        match src[i] {
            b'\\' => i += 2,
            b'\n' => return i,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    src.len()
}

/// `[[`, `[=[`, `[==[`...: the number of `=`, if a long bracket opens at `i`.
fn long_bracket_level(src: &[u8], i: usize) -> Option<usize> {
    if src.get(i) != Some(&b'[') {
        return None;
    }
    let level = skip_while(src, i + 1, |b| b == b'=') - (i + 1);
    (src.get(i + 1 + level) == Some(&b'[')).then_some(level)
}

/// From the opening long bracket at `i` to just after its closing bracket.
fn skip_long(src: &[u8], i: usize, level: usize) -> usize {
    let mut j = i + level + 2;
    while j < src.len() {
        if src[j] == b']' {
            let eq = skip_while(src, j + 1, |b| b == b'=') - (j + 1);
            if eq == level && src.get(j + 1 + eq) == Some(&b']') {
                return j + eq + 2;
            }
        }
        j += 1;
    }
    src.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_blanked_and_strings_kept() {
        let src =
            "-- hits\nx = o.last_access --[[ size\n inserted ]] + 1\ns = \"a -- id\" .. [[--b]]";
        assert_eq!(
            without_comments(src),
            " \nx = o.last_access   + 1\ns = \"a -- id\" .. [[--b]]"
        );
        assert_eq!(without_comments("y = 'é' -- ünï\n"), "y = 'é'  \n");
    }

    #[test]
    fn counts_the_tokens_of_code_only() {
        let src = br#"
-- or and or in a comment
--[==[ or and
  elseif ]] still comment ]==]
local s = "or and \" or" .. 'elseif' .. [[or
and]]
if a or b and c then elseif d then end
::top:: goto top
local orange, android, x1or = 1, 2, 3
"#;
        assert_eq!(chain_tokens(src), 6);
    }

    #[test]
    fn a_long_chain_is_refused_naming_the_chunk() {
        let chain = format!("return a{}", " or a".repeat(MAX_CHAIN_TOKENS + 1));
        let msg = check_compile_cost("=p@1", chain.as_bytes()).unwrap_err();
        assert!(msg.starts_with("p@1: the source holds 10001"), "{msg}");
        let fine = format!("return a{}", " or a".repeat(MAX_CHAIN_TOKENS));
        assert!(check_compile_cost("=p@1", fine.as_bytes()).is_ok());
        // Text in strings is not code.
        let prose = format!("return [[{}]]", " or a".repeat(MAX_CHAIN_TOKENS * 2));
        assert!(check_compile_cost("=p@1", prose.as_bytes()).is_ok());
    }
}
