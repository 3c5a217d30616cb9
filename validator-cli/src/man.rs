//! `validator man` and `validator completions`: man pages and shell completion scripts
//! rendered from the command tree (`cli.rs`).
//!
//! Contract: `man` writes `validator.1` on stdout, or every page into a directory, all or
//! none (`files::write_all_or_nothing`).

use std::path::PathBuf;

use clap::CommandFactory;
use validator::util::out::Out;

use crate::cli::Cli;
use crate::files::write_all_or_nothing;
use crate::{Res, Usage};

/// `validator completions SHELL`.
pub(crate) fn completions(shell: clap_complete::Shell, out: &mut Out) -> Res {
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "validator", &mut buf);
    out.bytes(&buf)?;
    Ok(true)
}

/// Man pages: the top page on stdout, or every page into `dir` (written atomically).
pub(crate) fn man(dir: Option<PathBuf>, out: &mut Out) -> Res {
    fn render(cmd: clap::Command) -> Result<Vec<u8>, Usage> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        Ok(buf)
    }
    let top = Cli::command();
    let Some(dir) = dir else {
        out.bytes(&render(top)?)?;
        return Ok(true);
    };
    let mut pages = vec![("validator".to_string(), top.clone())];
    fn walk(prefix: &str, c: &clap::Command, pages: &mut Vec<(String, clap::Command)>) {
        for s in c.get_subcommands() {
            let name = format!("{prefix}-{}", s.get_name());
            let page = s.clone().name(name.clone());
            pages.push((name.clone(), page));
            walk(&name, s, pages);
        }
    }
    walk("validator", &top, &mut pages);
    let mut rendered = Vec::new();
    for (name, cmd) in pages {
        rendered.push((format!("{name}.1"), render(cmd)?));
    }
    let files: Vec<(String, &[u8])> = rendered
        .iter()
        .map(|(n, b)| (n.clone(), b.as_slice()))
        .collect();
    write_all_or_nothing(&dir, &files)?;
    for (n, _) in &files {
        out.line(&dir.join(n).display().to_string())?;
    }
    Ok(true)
}
