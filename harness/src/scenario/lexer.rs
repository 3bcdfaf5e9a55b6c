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
    if line.is_ascii() {
        tokenize_ascii(line, out)
    } else {
        tokenize_chars(line, out)
    }
}

/// Whitespace as `char::is_whitespace` has it, for an ASCII byte (tab, line
/// feed, vertical tab, form feed, carriage return, space).
fn is_ascii_space(b: u8) -> bool {
    matches!(b, b'\t'..=b'\r' | b' ')
}

/// The punctuation token starting with `c` (two characters where `next`
/// completes one), or `None` for a character the language does not use.
/// Both tokenizers take their punctuation from here.
fn punctuation(c: char, next: Option<char>) -> Option<&'static str> {
    Some(match (c, next) {
        ('=', Some('>')) => "=>",
        ('=', Some('=')) => "==",
        ('!', Some('=')) => "!=",
        ('-', Some('>')) => "->",
        (':', _) => ":",
        ('=', _) => "=",
        (',', _) => ",",
        (';', _) => ";",
        ('*', _) => "*",
        ('|', _) => "|",
        ('(', _) => "(",
        (')', _) => ")",
        _ => return None,
    })
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// [`tokenize`] of an all-ASCII line: every byte is a character, so columns
/// are byte indices and no character is decoded (the generator and the
/// catalogue write such lines). The same tokens and errors as
/// [`tokenize_chars`].
fn tokenize_ascii<'s>(line: &'s str, out: &mut Vec<Token<'s>>) -> Result<(), LexError> {
    out.clear();
    let bytes = line.as_bytes();
    let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if is_ascii_space(c) {
            i += 1;
            continue;
        }
        let start = i;
        let next = at(i + 1);
        if is_word_byte(c) || (c == b'-' && next.is_ascii_digit()) {
            i += 1;
            loop {
                let d = at(i);
                if is_word_byte(d) || (d == b'-' && is_word_byte(at(i + 1))) {
                    i += 1;
                } else {
                    break;
                }
            }
            // `name[]`: a repeat step's list binding is one word.
            if at(i) == b'[' && at(i + 1) == b']' {
                i += 2;
            }
            out.push(Token {
                kind: Kind::Word,
                text: &line[start..i],
                col: start + 1,
                end: i,
                bytes: (start, i),
            });
            continue;
        }
        let Some(text) = punctuation(char::from(c), bytes.get(i + 1).map(|&b| char::from(b)))
        else {
            return Err(LexError {
                col: i + 1,
                ch: char::from(c),
            });
        };
        i += text.len();
        out.push(Token {
            kind: Kind::Punct,
            text,
            col: start + 1,
            end: i,
            bytes: (start, i),
        });
    }
    Ok(())
}

/// [`tokenize`] of any line: columns count characters.
fn tokenize_chars<'s>(line: &'s str, out: &mut Vec<Token<'s>>) -> Result<(), LexError> {
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
        let Some(text) = punctuation(c, next) else {
            return Err(LexError { col: ci + 1, ch: c });
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

    /// Lines of the catalogue, the tests' scenario files and the committed
    /// reports: the ASCII path reads each as the character path does.
    #[test]
    fn the_ascii_path_reads_lines_as_the_character_path_does() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        let mut dirs = vec![
            root.join("conformance"),
            root.join("harness"),
            root.join("mock-driver"),
        ];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "ipc") {
                    files.push(p);
                }
            }
        }
        assert!(files.len() > 100, "{} scenario files", files.len());
        let mut lines: Vec<String> = files
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .flat_map(|t| t.lines().map(str::to_string).collect::<Vec<_>>())
            .collect();
        // Edges: dashes, list names, operators at the end, bad characters.
        for extra in [
            "a-",
            "-",
            "-1-",
            "x-1",
            "a--b",
            "e[",
            "e[]",
            "e[]]",
            "=",
            "=>",
            "!",
            "-> ",
            "a\u{b}b",
            "a\x0cb\rc",
            "p: x = y @",
            "\t\tq",
            "&",
            "a*",
            "1-a-b",
            "-a",
        ] {
            lines.push(extra.to_string());
        }
        for line in &lines {
            let code = strip_comment(line);
            if !code.is_ascii() {
                continue;
            }
            let mut a = Vec::new();
            let mut c = Vec::new();
            let ascii = tokenize_ascii(code, &mut a).map_err(|e| (e.col, e.ch));
            let chars = tokenize_chars(code, &mut c).map_err(|e| (e.col, e.ch));
            assert_eq!((ascii, &a), (chars, &c), "{code:?}");
        }
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
