//! What the real node's console says about its slots (`debroot`'s `node-check`): RAUC's
//! `rauc status --detailed --output-format=json` ([`Rauc`]), `validator slot status`
//! ([`SlotStatus`]: the boot loader's variables, our record's verdict per slot, the
//! `problem:` lines) and the `rauc install` runs ([`installed`]); and [`agreement`], the
//! rule by which RAUC, GRUB and our record agree on a slot.
//!
//! Contract: each reader takes one boot's console and returns what its section said, or
//! an error naming the section that is missing or does not parse.
//!
//! Limits: GRUB's variables only (the real node's boot loader); slots `A` and `B`.

use std::collections::BTreeMap;

use crate::debroot;
use crate::rootfs::section;

/// What `rauc status --detailed --output-format=json` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rauc {
    /// The bootname RAUC says is booted.
    pub booted: String,
    /// The bootname of RAUC's primary slot.
    pub primary: Option<String>,
    /// Each bootname's boot status (`good`, `bad`).
    pub boot_status: BTreeMap<String, String>,
}

impl Rauc {
    /// RAUC's boot status of the slot booted as `bootname`.
    pub fn status(&self, bootname: &str) -> Option<&str> {
        self.boot_status.get(bootname).map(String::as_str)
    }

    /// Parses the JSON of `rauc status --detailed --output-format=json`.
    pub fn parse(text: &str) -> Result<Rauc, String> {
        let v: serde_json::Value =
            serde_json::from_str(text.trim()).map_err(|e| format!("rauc status: {e}: {text}"))?;
        let mut boot_status = BTreeMap::new();
        let mut names = BTreeMap::new();
        let slots = v["slots"]
            .as_array()
            .ok_or_else(|| format!("rauc status: no slots: {text}"))?;
        for slot in slots {
            for (name, s) in slot.as_object().into_iter().flatten() {
                if let Some(b) = s["bootname"].as_str() {
                    names.insert(name.clone(), b.to_string());
                    if let Some(st) = s["boot_status"].as_str() {
                        boot_status.insert(b.to_string(), st.to_string());
                    }
                }
            }
        }
        Ok(Rauc {
            booted: v["booted"].as_str().unwrap_or("").to_string(),
            primary: v["boot_primary"]
                .as_str()
                .and_then(|p| names.get(p).cloned()),
            boot_status,
        })
    }

    /// The section `name` of `console` ([`debroot::RAUC_STATUS`] after the installs,
    /// [`debroot::RAUC_BEFORE`] before them).
    pub fn of(console: &str, name: &str) -> Result<Rauc, String> {
        let text = section(console, name).ok_or_else(|| format!("no {name} section"))?;
        Rauc::parse(&text)
    }
}

/// What `validator slot status --esp /boot/efi` printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlotStatus {
    /// The boot loader's variables (`A_OK` ... `ORDER`).
    pub loader: BTreeMap<String, String>,
    /// Our record's verdict per slot: `true`, `false` or `-` (none).
    pub record: BTreeMap<String, String>,
    /// The `problem:` lines.
    pub problems: Vec<String>,
}

impl SlotStatus {
    /// The [`debroot::SLOT_STATUS`] section of `console`.
    pub fn of(console: &str) -> Result<SlotStatus, String> {
        let text = section(console, debroot::SLOT_STATUS)
            .ok_or_else(|| format!("no {} section", debroot::SLOT_STATUS))?;
        let mut st = SlotStatus::default();
        for line in text.lines() {
            if let Some(p) = line.strip_prefix("problem: ") {
                st.problems.push(p.to_string());
            } else if let Some((k, v)) = line
                .trim()
                .split_once('=')
                .filter(|_| line.starts_with("  "))
            {
                st.loader.insert(k.to_string(), v.to_string());
            } else if let Some((slot, rest)) = line.trim().split_once(": image ") {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let good = words
                    .iter()
                    .position(|w| *w == "good")
                    .and_then(|i| words.get(i + 1))
                    .ok_or_else(|| format!("slot status: no verdict in {line:?}"))?;
                st.record.insert(slot.to_string(), (*good).to_string());
            }
        }
        Ok(st)
    }

    /// GRUB's `X_OK` of `slot` is `1`.
    pub fn loader_good(&self, slot: &str) -> bool {
        self.loader.get(&format!("{slot}_OK")).map(String::as_str) == Some("1")
    }
}

/// `rauc install` of the bundles on the update disk: `<file> <exit status>` each.
pub fn installed(console: &str) -> Vec<String> {
    let names = console
        .lines()
        .filter_map(|l| l.strip_prefix(debroot::RAUC_INSTALL));
    let rcs = console
        .lines()
        .filter_map(|l| l.strip_prefix(debroot::RAUC_INSTALL_RC));
    names
        .zip(rcs)
        .map(|(n, rc)| format!("{} {}", n.trim(), rc.trim()))
        .collect()
}

/// Whether RAUC (`rauc`), GRUB and our record (`status`) agree, in a boot of `booted`:
/// the booted slot is RAUC's booted and primary slot and good in all three; for each slot
/// RAUC's `good` is GRUB's `X_OK=1`, and our record either has no verdict or the same
/// one; `validator slot status` names no problem. `Err` says where they differ.
pub fn agreement(booted: &str, rauc: &Rauc, status: &SlotStatus) -> Result<(), String> {
    let mut why = Vec::new();
    if rauc.booted != booted {
        why.push(format!("RAUC says {} is booted", rauc.booted));
    }
    if rauc.primary.as_deref() != Some(booted) {
        why.push(format!("RAUC's primary is {:?}", rauc.primary));
    }
    for s in ["A", "B"] {
        let grub = status.loader_good(s);
        let r = rauc.status(s) == Some("good");
        if r != grub {
            why.push(format!(
                "slot {s}: RAUC {:?}, GRUB {s}_OK={}",
                rauc.status(s),
                u8::from(grub)
            ));
        }
        match status.record.get(s).map(String::as_str) {
            None | Some("-") => {}
            Some(v) if v == grub.to_string() => {}
            Some(v) => why.push(format!(
                "slot {s}: our record good {v}, GRUB {s}_OK={}",
                u8::from(grub)
            )),
        }
        if s == booted && !(grub && r) {
            why.push(format!("the booted slot {s} is not good"));
        }
    }
    why.extend(status.problems.iter().map(|p| format!("problem: {p}")));
    if why.is_empty() {
        Ok(())
    } else {
        Err(why.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "ROOT-SLOT-STATUS-BEGIN\nbootloader grub\n  A_OK=1\n  A_TRY=0\n  B_OK=0\n  B_TRY=0\n  ORDER=A B\n\
record generation 15, 0 failed boot(s) in a row, last slot A\n  A: image x-A attempts 0 good true last pass \n  B: image x-B attempts 0 good - last pass \nROOT-SLOT-STATUS-END\n";

    fn rauc(booted: &str, primary: &str, a: &str, b: &str) -> Rauc {
        let json = format!(
            "{{\"booted\":\"{booted}\",\"boot_primary\":\"rootfs.{}\",\"slots\":[{{\"rootfs.0\":{{\"bootname\":\"A\",\"boot_status\":\"{a}\"}}}},{{\"rootfs.1\":{{\"bootname\":\"B\",\"boot_status\":\"{b}\"}}}},{{\"rootfs-sig.1\":{{\"bootname\":null,\"boot_status\":null}}}}]}}",
            if primary == "A" { 0 } else { 1 }
        );
        Rauc::parse(&json).unwrap()
    }

    /// The three agree after RAUC marked B bad and our record dropped its verdict; a
    /// record still holding B good, RAUC's primary elsewhere or a problem line is named.
    #[test]
    fn agreement_names_each_difference() {
        let st = SlotStatus::of(STATUS).unwrap();
        assert_eq!(st.record["B"], "-");
        assert!(!st.loader_good("B"));
        assert_eq!(agreement("A", &rauc("A", "A", "good", "bad"), &st), Ok(()));
        let e = agreement("A", &rauc("A", "B", "good", "good"), &st).unwrap_err();
        assert!(e.contains("RAUC's primary is Some(\"B\")"), "{e}");
        assert!(
            e.contains("slot B: RAUC Some(\"good\"), GRUB B_OK=0"),
            "{e}"
        );
        let stale = SlotStatus::of(&STATUS.replace("good - last", "good true last")).unwrap();
        let e = agreement("A", &rauc("A", "A", "good", "bad"), &stale).unwrap_err();
        assert!(e.contains("our record good true, GRUB B_OK=0"), "{e}");
        let problem = SlotStatus::of(&STATUS.replace(
            "ROOT-SLOT-STATUS-END",
            "problem: slot B: the boot loader marks it bad, our record good\nROOT-SLOT-STATUS-END",
        ))
        .unwrap();
        assert!(agreement("A", &rauc("A", "A", "good", "bad"), &problem).is_err());
        assert!(SlotStatus::of("nothing").is_err());
        assert!(Rauc::parse("{").is_err());
    }
}
