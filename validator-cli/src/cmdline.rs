//! `validator cmdline`: how a kernel command line is read (the parameters, the init's
//! arguments, and the warnings `BootArgs` gives), from the words given or /proc/cmdline.

use std::path::Path;

use validator::util::fs::read_limited;
use validator::util::out::Out;

use crate::Res;

/// `validator cmdline [LINE...]`.
pub(crate) fn show(words: Vec<String>, out: &mut Out) -> Res {
    use validator::config::cmdline::{split, BootArgs};
    let line = if words.is_empty() {
        let b = read_limited(
            Path::new("/proc/cmdline"),
            validator::stages::start::CMDLINE_MAX,
        )?;
        String::from_utf8_lossy(&b).into_owned()
    } else {
        words.join(" ")
    };
    let line = line.trim_end();
    let s = split(line);
    for p in &s.params {
        match &p.value {
            Some(v) => out.line(&format!("{} = {v:?}", p.name))?,
            None => out.line(&p.name)?,
        }
    }
    if !s.init_args.is_empty() {
        out.line(&format!("-- {:?}", s.init_args))?;
    }
    for w in BootArgs::parse(line).warnings {
        out.line(&format!("warning: {w}"))?;
    }
    Ok(true)
}
