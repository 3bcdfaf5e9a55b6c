//! Splits one statement line into tokens with 1-based columns.

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `[A-Za-z0-9_]` runs (with inner `-`, and a leading `-` before a digit).
    Word,
    /// Punctuation: `:` `=` `==` `=>` `!=` `,` `;` `->` `*`.
    Punct,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: Kind,
    pub text: String,
    /// 1-based column (in characters) where the token starts.
    pub col: usize,
    /// Character index just past the token (0-based).
    pub end: usize,
}

impl Token {
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

/// Tokens of one line (comment already stripped).
pub(crate) fn tokenize(line: &str) -> Result<Vec<Token>, LexError> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        let next = chars.get(i + 1).copied();
        let word_start = is_word_char(c) || (c == '-' && next.is_some_and(|n| n.is_ascii_digit()));
        if word_start {
            i += 1;
            while i < chars.len() {
                let d = chars[i];
                let inner_dash = d == '-' && chars.get(i + 1).is_some_and(|&n| is_word_char(n));
                if is_word_char(d) || inner_dash {
                    i += 1;
                } else {
                    break;
                }
            }
            out.push(Token {
                kind: Kind::Word,
                text: chars[start..i].iter().collect(),
                col: start + 1,
                end: i,
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
                _ => return Err(LexError { col: i + 1, ch: c }),
            },
        };
        i += text.len();
        out.push(Token {
            kind: Kind::Punct,
            text: text.to_string(),
            col: start + 1,
            end: i,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        tokenize(s)
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
    }

    #[test]
    fn columns_are_one_based_characters() {
        let t = tokenize("é").err().map(|e| (e.col, e.ch));
        assert_eq!(t, Some((1, 'é')));
        let toks = tokenize("  a =>").ok().unwrap_or_default();
        assert_eq!(toks[0].col, 3);
        assert_eq!(toks[1].col, 5);
    }
}
