//! Function and file lengths, for the size rule (`validator/tests/code_size.rs`): every
//! function with a body, named and measured in lines from its `fn` line to the line of its
//! closing brace.
//!
//! Contract: the text is read through [`crate::imports::blank`] first (comments and
//! literals blanked, lines kept), so a brace inside a string or a comment never counts;
//! a body is the brace block that follows the signature at bracket depth 0 (a `fn` that
//! ends with `;` first, a trait method without a body, has none). Nested functions and
//! closures are measured inside the function that holds them, and a nested `fn` also on
//! its own.
//!
//! Current limits: a text scan, not a parse: a `fn` written by a macro is measured where
//! the macro's text stands.

use crate::imports::{blank, is_ident};

/// One function: its name, the line of its `fn` keyword (1-based) and its length in lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// Every function with a body in `text`, in order of appearance.
pub fn functions(text: &str) -> Vec<Function> {
    let s = blank(text);
    let line_at = |pos: usize| 1 + s.iter().take(pos).filter(|&&c| c == '\n').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < s.len() {
        let keyword = s[i] == 'f'
            && s[i + 1] == 'n'
            && s[i + 2].is_whitespace()
            && (i == 0 || !is_ident(s[i - 1]));
        if !keyword {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < s.len() && s[j].is_whitespace() {
            j += 1;
        }
        let name: String = s[j..].iter().take_while(|&&c| is_ident(c)).collect();
        if let Some((open, close)) = body(&s, j) {
            let (first, last) = (line_at(i), line_at(close));
            out.push(Function {
                name,
                line: first,
                lines: last - first + 1,
            });
            // Nested functions are found on the way through the body.
            i = open;
        } else {
            i = j;
        }
    }
    out
}

/// The body of the function whose signature starts at `from`: the positions of its
/// opening and closing braces, or `None` for a declaration without one.
fn body(s: &[char], from: usize) -> Option<(usize, usize)> {
    let mut depth = 0i32;
    let mut k = from;
    while k < s.len() {
        match s[k] {
            '(' | '[' | '<' => depth += 1,
            // `->` is no closing bracket.
            '>' if k > 0 && s[k - 1] == '-' => {}
            ')' | ']' | '>' => depth -= 1,
            ';' if depth <= 0 => return None,
            '{' if depth <= 0 => break,
            _ => {}
        }
        k += 1;
    }
    let open = k;
    let mut braces = 0i32;
    while k < s.len() {
        match s[k] {
            '{' => braces += 1,
            '}' => {
                braces -= 1;
                if braces == 0 {
                    return Some((open, k));
                }
            }
            _ => {}
        }
        k += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_bodies_and_skips_declarations_strings_and_comments() {
        let src = "trait T {\n    fn decl(&self) -> u8;\n}\n\
                   pub fn a<T: Into<u8>>(x: T) -> Result<u8, ()> {\n    let s = \"}\";\n    // }\n    Ok(x.into())\n}\n\
                   fn b() {\n    fn inner() {}\n    let c = '{';\n}\n";
        let f = functions(src);
        let got: Vec<(&str, usize, usize)> = f
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(got, vec![("a", 4, 5), ("b", 9, 4), ("inner", 10, 1)]);
    }
}
