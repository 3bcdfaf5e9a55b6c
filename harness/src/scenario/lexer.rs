//! Splits one statement line into tokens with 1-based columns.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `[A-Za-z0-9_]` runs (with inner `-`, and a leading `-` before a digit).
    Word,
    /// Punctuation: `:` `=` `==` `=>` `!=` `,` `;` `->` `*` `|`.
    Punct,
}

/// A token: a slice of its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token<'s> {
    pub kind: Kind,
    pub text: &'s str,
    /// 1-based column (in characters) where the token starts.
    pub col: usize,
    /// Character index just past the token (0-based).
    pub end: usize,
    /// Byte range of the token in its line.
    pub bytes: (usize, usize),
}

impl Token<'_> {
    pub fn is_word(&self) -> bool {
        self.kind == Kind::Word
    }

    pub fn is_punct(&self, p: &str) -> bool {
        self.kind == Kind::Punct && self.text == p
    }
}

/// A character the lexer does not accept: (1-based column, the character).
pub(crate) struct LexError {
    pub col: usize,
    pub ch: char,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The line without its comment (`#` to the end of the line).
pub(crate) fn strip_comment(line: &str) -> &str {
    match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    }
}

/// Tokens of one line (comment already stripped), into `out` (cleared first).
pub(crate) fn tokenize<'s>(line: &'s str, out: &mut Vec<Token<'s>>) -> Result<(), LexError> {
    out.clear();
    let bytes = line.as_bytes();
    // Every character a token is made of, and every one looked ahead at, is
    // ASCII: a byte compared with one is the character compared with it.
    let at = |i: usize| bytes.get(i).map(|&b| char::from(b));
    // `i`: byte index; `ci`: character index (columns count characters).
    let (mut i, mut ci) = (0, 0);
    while i < bytes.len() {
        let c = match bytes[i] {
            b if b.is_ascii() => char::from(b),
            _ => match line[i..].chars().next() {
                Some(c) => c,
                None => break,
            },
        };
        if c.is_whitespace() {
            i += c.len_utf8();
            ci += 1;
            continue;
        }
        let (start, cstart) = (i, ci);
        let next = at(i + 1);
        let word_start = is_word_char(c) || (c == '-' && next.is_some_and(|n| n.is_ascii_digit()));
        if word_start {
            i += 1;
            while let Some(d) = at(i) {
                let inner_dash = d == '-' && at(i + 1).is_some_and(is_word_char);
                if is_word_char(d) || inner_dash {
                    i += 1;
                } else {
                    break;
                }
            }
            // `name[]`: a repeat step's list binding is one word.
            if at(i) == Some('[') && at(i + 1) == Some(']') {
                i += 2;
            }
            ci += i - start;
            out.push(Token {
                kind: Kind::Word,
                text: &line[start..i],
                col: cstart + 1,
                end: ci,
                bytes: (start, i),
            });
            continue;
        }
        let two = match (c, next) {
            ('=', Some('>')) => Some("=>"),
            ('=', Some('=')) => Some("=="),
            ('!', Some('=')) => Some("!="),
            ('-', Some('>')) => Some("->"),
            _ => None,
        };
        let text = match two {
            Some(t) => t,
            None => match c {
                ':' => ":",
                '=' => "=",
                ',' => ",",
                ';' => ";",
                '*' => "*",
                '|' => "|",
                '(' => "(",
                ')' => ")",
                _ => return Err(LexError { col: ci + 1, ch: c }),
            },
        };
        i += text.len();
        ci += text.len();
        out.push(Token {
            kind: Kind::Punct,
            text,
            col: cstart + 1,
            end: ci,
            bytes: (start, i),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Result<Vec<Token<'_>>, LexError> {
        let mut out = Vec::new();
        tokenize(s, &mut out).map(|()| out)
    }

    fn texts(s: &str) -> Vec<&str> {
        toks(s)
            .ok()
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.text)
            .collect()
    }

    #[test]
    fn words_and_punctuation() {
        assert_eq!(
            texts("peer: p = ipc_open h => ok, == p"),
            ["peer", ":", "p", "=", "ipc_open", "h", "=>", "ok", ",", "==", "p"]
        );
        assert_eq!(texts("send h->peer"), ["send", "h", "->", "peer"]);
        assert_eq!(texts("ab*16 00*48"), ["ab", "*", "16", "00", "*", "48"]);
        assert_eq!(
            texts("expect hazard free-while-mapped"),
            ["expect", "hazard", "free-while-mapped"]
        );
        assert_eq!(texts("value -1"), ["value", "-1"]);
        assert_eq!(
            texts("=> InvalidValue|InvalidHandle"),
            ["=>", "InvalidValue", "|", "InvalidHandle"]
        );
    }

    #[test]
    fn columns_are_one_based_characters() {
        let t = toks("é").err().map(|e| (e.col, e.ch));
        assert_eq!(t, Some((1, 'é')));
        let t = toks("  a =>").ok().unwrap_or_default();
        assert_eq!(t[0].col, 3);
        assert_eq!(t[1].col, 5);
        // Columns and ends count characters, byte ranges bytes.
        let t = toks("\u{a0}\u{a0}ab => c").ok().unwrap_or_default();
        assert_eq!((t[0].col, t[0].end, t[0].bytes), (3, 4, (4, 6)));
        assert_eq!((t[1].col, t[1].end, t[1].bytes), (6, 7, (7, 9)));
        let t = toks("\u{a0}é").err().map(|e| (e.col, e.ch));
        assert_eq!(t, Some((2, 'é')));
    }
}
