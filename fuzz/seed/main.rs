//! Seeds for the fuzz targets that come from our own writers, from a real TPM (swtpm) or
//! from the real kernel's image and modules: `seed OUT WORK VMLINUZ MODULE...`.
//!
//! - `tpm_response`: swtpm's answers to the commands the boot sends, recorded through our
//!   client, for several PCR bank sets;
//! - `eventlog`, `cel`: logs as the measure stage writes them (our writers), several banks;
//! - `slotstate`: records as the slot stage writes them;
//! - `cpio`: archives from the newc writer's two front ends (mkinitramfs' `Archive`, the
//!   kexec `Writer`);
//! - `x509`, `modsig`, `pkcs7`, `symvers`, `vmlinuz`: the kernel's built-in certificates,
//!   its modules framed with the signing certificate, their PKCS#7 signatures, its
//!   exported CRCs, and small bzImages made of its real setup header and a compressed
//!   payload (xz with the x86 filter, zstd, gzip, legacy LZ4, as the kernel build does).
//!
//! `fuzz/seed.sh` runs it (after the tool-made seeds); each file it writes is printed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use validator::formats::tpm::cel::CelRecord;
use validator::formats::tpm::eventlog::EventLog;
use validator::formats::tpm::{HashAlg, TpmError};
use test_support::swtpm::{create_state, Channel, Swtpm};
use validator::sys::tpm::{TcpTransport, Tpm, Transport};

type Res<T> = Result<T, String>;

fn write(out: &Path, target: &str, name: &str, bytes: &[u8]) -> Res<()> {
    let dir = out.join(target);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let p = dir.join(name);
    std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    println!("{}", p.display());
    Ok(())
}

fn read(p: &Path) -> Res<Vec<u8>> {
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}

/// `[u16 LE length][certificate][rest]`, the framing of the targets that take a store.
fn framed(cert: &[u8], rest: &[u8]) -> Vec<u8> {
    let mut v = (cert.len() as u16).to_le_bytes().to_vec();
    v.extend_from_slice(cert);
    v.extend_from_slice(rest);
    v
}

fn run(cmd: &mut Command) -> Res<Vec<u8>> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// Pipes `input` through a compressor.
fn compress(args: &[&str], input: &[u8], work: &Path) -> Res<Vec<u8>> {
    let f = work.join("compress-input");
    std::fs::write(&f, input).map_err(|e| format!("{}: {e}", f.display()))?;
    run(Command::new(args[0]).args(&args[1..]).arg(&f))
}

/// A swtpm on `dir` (a fresh state with `banks` first, when given), over TCP.
fn swtpm(dir: &Path, banks: Option<&str>, flags: &str) -> Res<Swtpm> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    if let Some(b) = banks {
        create_state(dir, b, false).map_err(|e| e.to_string())?;
    }
    Swtpm::serve(dir, &Channel::Tcp, flags, &dir.join("swtpm.log")).map_err(|e| e.to_string())
}

/// Passes commands to swtpm and keeps every response.
struct Recorder {
    inner: TcpTransport,
    responses: Vec<u8>,
}

impl Transport for Recorder {
    fn transact(&mut self, cmd: &[u8], timeout: Duration) -> Result<Vec<u8>, TpmError> {
        let r = self.inner.transact(cmd, timeout)?;
        self.responses.extend_from_slice(&r);
        Ok(r)
    }
}

/// swtpm's responses to the fuzz target's command sequence (see `tpm_response`).
fn tpm_seeds(out: &Path, work: &Path) -> Res<()> {
    let cases = [
        ("default", None, "not-need-init,startup-clear"),
        ("sha256", Some("sha256"), "not-need-init,startup-clear"),
        (
            "sha1-sha256",
            Some("sha1,sha256"),
            "not-need-init,startup-clear",
        ),
        (
            "sha256-sha384-sha512",
            Some("sha256,sha384,sha512"),
            "not-need-init",
        ),
    ];
    for (name, banks, flags) in cases {
        let t = swtpm(&work.join(format!("swtpm-{name}")), banks, flags)?;
        let inner =
            TcpTransport::connect(t.addr(), Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let mut tpm = Tpm::new(Recorder {
            inner,
            responses: Vec::new(),
        });
        tpm.startup_clear().map_err(|e| e.to_string())?;
        let b = tpm.get_pcr_banks().map_err(|e| e.to_string())?;
        tpm.pcr_read(0, &b).map_err(|e| e.to_string())?;
        let d: Vec<(HashAlg, Vec<u8>)> = b.iter().map(|h| (*h, h.digest(b"fuzz"))).collect();
        tpm.pcr_extend(11, &d).map_err(|e| e.to_string())?;
        tpm.pcr_read(11, &b).map_err(|e| e.to_string())?;
        let rec = tpm.into_transport();
        write(
            out,
            "tpm_response",
            &format!("swtpm-{name}"),
            &rec.responses,
        )?;
    }
    Ok(())
}

/// The measure stage's records: phases in PCR 11, the BOM, command line, modules, root
/// hash and decision in PCR 13.
fn log_seeds(out: &Path) -> Res<()> {
    use HashAlg::*;
    let events: [(u32, &str); 6] = [
        (11, "enter-initrd"),
        (
            13,
            "cmdline:root=PARTLABEL=root-a ro console=ttyS0 validator.slot=A",
        ),
        (
            13,
            "module:nvme sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef",
        ),
        (
            13,
            "verity:7f2a84461b51447d6b4cf73858361503c1904bed5dffecc516211eeec089990a",
        ),
        (13, "decision:pass"),
        (11, "leave-initrd"),
    ];
    for banks in [
        vec![Sha256],
        vec![Sha1, Sha256],
        vec![Sha256, Sha384, Sha512],
    ] {
        let names: Vec<&str> = banks.iter().map(|b| b.name()).collect();
        let name = names.join("-");
        let mut log = EventLog::new(&banks);
        let mut cel = Vec::new();
        for (pcr, s) in events {
            log.measure(pcr, s.as_bytes()).map_err(|e| e.to_string())?;
            let kind = if pcr == 11 { "phase" } else { "validator" };
            cel.extend(CelRecord::systemd(pcr, kind, s, &banks).to_bytes());
        }
        write(out, "eventlog", &format!("ours-{name}"), &log.to_bytes())?;
        write(out, "cel", &format!("ours-{name}"), &cel)?;
    }
    Ok(())
}

fn slotstate_seeds(out: &Path) -> Res<()> {
    use validator::formats::slotstate::{encode, Record, SlotRecord, State, HEADER};
    let mut s = State {
        consecutive_failures: 1,
        last_slot: Some("A".into()),
        ..State::default()
    };
    s.slots.insert(
        "A".into(),
        SlotRecord {
            image_id: Some("gpu-node-2026.11.30".into()),
            bom_sha256: Some(
                "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef".into(),
            ),
            attempts: 2,
            good: Some(false),
            last_decision: Some("fallback".into()),
            last_fault: Some("image".into()),
            last_reason: Some("module nvidia: signature not trusted".into()),
            last_report: Some(serde_json::json!({
                "version": 2,
                "decision": "fallback",
                "stages": [{"name": "modules", "ok": false, "ms": 812.5}],
            })),
        },
    );
    s.slots.insert(
        "B".into(),
        SlotRecord {
            image_id: Some("gpu-node-2026.10.02".into()),
            good: Some(true),
            ..SlotRecord::default()
        },
    );
    for (g, state) in [(1u64, State::default()), (7, s)] {
        let r = Record {
            generation: g,
            state,
        };
        // The ESP copies are 256 KiB of mostly zeros; the seeds keep a little padding.
        let bytes = encode(&r, HEADER + 4096).map_err(|e| e.to_string())?;
        write(out, "slotstate", &format!("generation-{g}"), &bytes)?;
    }
    Ok(())
}

fn cpio_seeds(out: &Path) -> Res<()> {
    use mkinitramfs::cpio::{Archive, Entry, Kind};
    let mut a = Archive::new();
    let add = |a: &mut Archive, p: &str, k: Kind, perm: u32| {
        a.add(p, Entry { kind: k, perm }).map_err(|e| e.to_string())
    };
    add(
        &mut a,
        "/init",
        Kind::File(b"\x7fELF static init".to_vec()),
        0o755,
    )?;
    add(
        &mut a,
        "/dev/console",
        Kind::CharDev { major: 5, minor: 1 },
        0o600,
    )?;
    add(
        &mut a,
        "/dev/sda",
        Kind::BlockDev { major: 8, minor: 0 },
        0o660,
    )?;
    add(&mut a, "/sbin", Kind::Symlink("usr/sbin".into()), 0o777)?;
    a.file(
        "/etc/validator/bom.toml",
        b"schema = 1\nimage_id = \"x\"\n".to_vec(),
        0o644,
    )
    .map_err(|e| e.to_string())?;
    a.file(
        "/lib/modules/6.1.0-57-amd64/modules.dep",
        b"kernel/lib/crc16.ko:\n".to_vec(),
        0o644,
    )
    .map_err(|e| e.to_string())?;
    let one = a.write(0);
    write(out, "cpio", "mkinitramfs-writer", &one)?;
    let mut w = validator::formats::newc::Writer::new();
    w.dir("etc")
        .dir("etc/validator")
        .file(
            "etc/validator/carried/report.json",
            b"{\"decision\":\"pass\"}\n",
        )
        .file("etc/empty", b"");
    let two = w.finish();
    write(out, "cpio", "kexec-writer", &two)?;
    // The kexec boot appends an archive to the slot's: two concatenated.
    let mut both = one;
    both.extend_from_slice(&two);
    write(out, "cpio", "concatenated", &both)?;
    Ok(())
}

/// Seeds from the kernel image and modules.
fn kernel_seeds(out: &Path, work: &Path, vmlinuz: &Path, modules: &[PathBuf]) -> Res<()> {
    use validator::formats::vmlinuz::KernelFacts;
    let img = read(vmlinuz)?;
    let facts = KernelFacts::from_image(&img).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    for (i, c) in facts.certs.iter().enumerate() {
        write(out, "x509", &format!("kernel-cert-{i}.der"), c)?;
    }
    let cert = facts
        .certs
        .first()
        .ok_or("the kernel has no built-in certificate")?;
    for m in modules {
        let name = m
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let raw = read(m)?;
        write(
            out,
            "modsig",
            &format!("{name}-kernel-cert"),
            &framed(cert, &raw),
        )?;
        if let Ok(s) = validator::formats::kmod::sig::split(&raw) {
            write(out, "pkcs7", &format!("{name}.p7"), s.pkcs7)?;
        }
    }
    // The exported CRCs, the head of the table (the whole is 2 MB).
    let text = facts.symvers().to_text();
    let head: String = text.lines().take(200).map(|l| format!("{l}\n")).collect();
    write(out, "symvers", "vmlinux-head", head.as_bytes())?;
    // bzImages: the real setup header, a small ELF payload compressed as the kernel
    // build compresses it (payload_offset 0, payload_length patched).
    let setup_sects = match img.get(0x1f1).copied() {
        Some(0) | None => 4,
        Some(n) => usize::from(n),
    };
    let setup = img
        .get(..(setup_sects + 1) * 512)
        .ok_or("vmlinuz shorter than its setup")?;
    let mut elf = read(modules.first().ok_or("no module given")?)?;
    // An executable ELF (the kernel's type) with the real banner in it.
    if let Some(t) = elf.get_mut(16..18) {
        t.copy_from_slice(&2u16.to_le_bytes());
    }
    elf.extend_from_slice(
        format!(
            "\0Linux version {} (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC\n\0{}\0",
            facts.release,
            facts.vermagic.clone().unwrap_or_default()
        )
        .as_bytes(),
    );
    let payloads: [(&str, &[&str]); 4] = [
        (
            "xz",
            &[
                "xz",
                "--format=xz",
                "--check=crc32",
                "--x86",
                "--lzma2=preset=6",
                "-c",
            ],
        ),
        ("zstd", &["zstd", "-19", "-q", "-c"]),
        ("gzip", &["gzip", "-9", "-n", "-c"]),
        ("lz4", &["lz4", "-l", "-9", "-q", "-c"]),
    ];
    for (name, cmd) in payloads {
        let mut p = compress(cmd, &elf, work)?;
        // The build appends the decompressed size.
        p.extend_from_slice(&(elf.len() as u32).to_le_bytes());
        let mut b = setup.to_vec();
        b[0x248..0x24c].copy_from_slice(&0u32.to_le_bytes());
        b[0x24c..0x250].copy_from_slice(&(p.len() as u32).to_le_bytes());
        b.extend_from_slice(&p);
        write(out, "vmlinuz", &format!("bzimage-{name}"), &b)?;
    }
    // The real image's head: setup header and the payload's first bytes.
    write(
        out,
        "vmlinuz",
        "real-head",
        img.get(..64 << 10).unwrap_or(&img),
    )?;
    Ok(())
}

/// sfdisk's 512-byte-sector table laid out again on 4096-byte sectors: protective MBR,
/// header at LBA 1, the 4-entry array at LBA 2, partitions at the same byte offsets
/// rounded to sectors, backup array and header at the end, CRCs recomputed.
fn gpt_4k(out: &Path, work: &Path) -> Res<()> {
    const SS: usize = 4096;
    let img = read(&work.join("gpt-512.img"))?;
    let hdr = img.get(512..512 + 92).ok_or("short GPT image")?;
    let entry_size = u32::from_le_bytes(hdr[84..88].try_into().map_err(|_| "hdr")?) as usize;
    let count = u32::from_le_bytes(hdr[80..84].try_into().map_err(|_| "hdr")?) as usize;
    let entries_lba = u64::from_le_bytes(hdr[72..80].try_into().map_err(|_| "hdr")?) as usize;
    let mut arr = img
        .get(entries_lba * 512..entries_lba * 512 + count * entry_size)
        .ok_or("short entry array")?
        .to_vec();
    let sectors = 16u64;
    for e in arr.chunks_exact_mut(entry_size) {
        for o in [32, 40] {
            let lba = u64::from_le_bytes(e[o..o + 8].try_into().map_err(|_| "entry")?);
            if lba != 0 {
                let new = (lba * 512 / SS as u64).clamp(3, sectors - 3);
                e[o..o + 8].copy_from_slice(&new.to_le_bytes());
            }
        }
    }
    let arr_crc = crc32(&arr);
    let mut disk = vec![0u8; sectors as usize * SS];
    disk[..512].copy_from_slice(&img[..512]);
    let header = |cur: u64, alt: u64, entries: u64| -> Vec<u8> {
        let mut h = hdr.to_vec();
        h[24..32].copy_from_slice(&cur.to_le_bytes());
        h[32..40].copy_from_slice(&alt.to_le_bytes());
        h[40..48].copy_from_slice(&3u64.to_le_bytes());
        h[48..56].copy_from_slice(&(sectors - 3).to_le_bytes());
        h[72..80].copy_from_slice(&entries.to_le_bytes());
        h[88..92].copy_from_slice(&arr_crc.to_le_bytes());
        h[16..20].copy_from_slice(&[0; 4]);
        let c = crc32(&h);
        h[16..20].copy_from_slice(&c.to_le_bytes());
        h
    };
    let last = sectors - 1;
    disk[SS..SS + 92].copy_from_slice(&header(1, last, 2));
    disk[2 * SS..2 * SS + arr.len()].copy_from_slice(&arr);
    let b = (last - 1) as usize * SS;
    disk[b..b + arr.len()].copy_from_slice(&arr);
    disk[last as usize * SS..last as usize * SS + 92].copy_from_slice(&header(last, 1, last - 1));
    write(out, "gpt", "sfdisk-relaid-4096", &disk)
}

/// CRC-32 (IEEE), as GPT uses it.
fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [out, work, vmlinuz, modules @ ..] = args.as_slice() else {
        eprintln!("usage: seed OUT WORK VMLINUZ MODULE...");
        std::process::exit(2);
    };
    let steps: [(&str, Box<dyn Fn() -> Res<()>>); 6] = [
        ("GPT on 4096-byte sectors", Box::new(|| gpt_4k(out, work))),
        ("swtpm responses", Box::new(|| tpm_seeds(out, work))),
        ("event logs", Box::new(|| log_seeds(out))),
        ("slot state", Box::new(|| slotstate_seeds(out))),
        ("cpio", Box::new(|| cpio_seeds(out))),
        (
            "kernel",
            Box::new(|| kernel_seeds(out, work, vmlinuz, modules)),
        ),
    ];
    let mut failed = false;
    for (what, f) in steps {
        if let Err(e) = f() {
            eprintln!("seed: {what}: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
