//! Pure parsers of the sysfs and procfs values the preflight reads: PCI ids and class,
//! PCIe link speed and width, AER counters, InfiniBand port state / physical state / rate,
//! space-padded NVMe strings, the NVIDIA driver's `/proc/driver/nvidia/version`,
//! `gpus/<bdf>/information` and NVSwitch `information`, the lockdown mode, the Secure Boot
//! EFI variable and dpkg's status database (for the fabric manager's package).
//!
//! Contract: every function takes the text (or bytes) of one file exactly as read and
//! returns a value or a [`ValueError`] saying what was expected; the caller adds the path.
//! Nothing here reads a file, panics or knows a policy. The formats follow the kernel's
//! `sysfs_emit` calls and NVIDIA's `seq_printf` calls named on each function (see
//! `docs/FIXTURES.md` for the sources); trailing whitespace is kept where it is data.
//!
//! Current limits: x86-64 kernels 5.x-6.x and NVIDIA 5xx drivers are the formats checked;
//! values are ASCII (a byte outside ASCII is an error where a number or keyword is
//! expected).

use std::fmt;

/// A value that is not what the kernel writes there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

fn bad(what: &str, text: &str) -> ValueError {
    let mut shown: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        shown.push_str("...");
    }
    ValueError(format!("{shown:?} is not {what}"))
}

/// The one line of a sysfs attribute: the text without its trailing newline. An empty
/// value, a second line or a NUL is an error.
pub fn one_line<'a>(text: &'a str, what: &str) -> Result<&'a str, ValueError> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    if line.is_empty() || line.contains('\n') || line.contains('\0') {
        return Err(bad(what, text));
    }
    Ok(line)
}

fn hex_value(text: &str, what: &str, max_digits: usize) -> Result<u32, ValueError> {
    let line = one_line(text, what)?;
    let digits = line.strip_prefix("0x").ok_or_else(|| bad(what, text))?;
    if digits.is_empty()
        || digits.len() > max_digits
        || !digits.bytes().all(|c| c.is_ascii_hexdigit())
    {
        return Err(bad(what, text));
    }
    u32::from_str_radix(digits, 16).map_err(|_| bad(what, text))
}

/// A PCI `vendor`, `device`, `subsystem_vendor` or `subsystem_device` file: `"0x%04x\n"`
/// (`drivers/pci/pci-sysfs.c`).
pub fn pci_id(text: &str) -> Result<u16, ValueError> {
    let v = hex_value(text, "a PCI id (0x%04x)", 4)?;
    u16::try_from(v).map_err(|_| bad("a PCI id (0x%04x)", text))
}

/// A PCI `class` file: `"0x%06x\n"` (base class, subclass, programming interface).
pub fn pci_class(text: &str) -> Result<u32, ValueError> {
    hex_value(text, "a PCI class (0x%06x)", 6)
}

/// A decimal unsigned value on one line (`current_link_width`, `tainted`, ...).
pub fn decimal(text: &str) -> Result<u64, ValueError> {
    let line = one_line(text, "a decimal number")?;
    if line.is_empty() || line.len() > 20 || !line.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad("a decimal number", text));
    }
    line.parse().map_err(|_| bad("a decimal number", text))
}

/// A PCIe link width file (`current_link_width`, `max_link_width`): `"%u\n"` of the
/// negotiated or maximum number of lanes (0 when the link is down, 255 when unknown).
pub fn link_width(text: &str) -> Result<u32, ValueError> {
    let v = decimal(text).map_err(|_| bad("a link width (lanes)", text))?;
    u32::try_from(v).map_err(|_| bad("a link width (lanes)", text))
}

/// A PCIe link speed in megatransfers per second (`32.0 GT/s` is 32000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkSpeed(pub u32);

impl LinkSpeed {
    /// The speed as the kernel (5.7 and later) prints it, without ` PCIe`.
    pub fn gts(self) -> String {
        let whole = self.0 / 1000;
        let frac = self.0 % 1000;
        if frac == 0 {
            format!("{whole}.0 GT/s")
        } else {
            let f = format!("{frac:03}");
            format!("{whole}.{} GT/s", f.trim_end_matches('0'))
        }
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.gts())
    }
}

/// A decimal with up to three fractional digits, times 1000 (`2.5` is 2500).
fn milli(s: &str) -> Option<u32> {
    let (whole, frac) = match s.split_once('.') {
        Some((w, f)) => (w, f),
        None => (s, ""),
    };
    if whole.is_empty()
        || whole.len() > 6
        || frac.len() > 3
        || !whole.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || (s.contains('.') && frac.is_empty())
    {
        return None;
    }
    let w: u32 = whole.parse().ok()?;
    let mut f: u32 = 0;
    let mut scale = 100;
    for c in frac.bytes() {
        f += u32::from(c - b'0') * scale;
        scale /= 10;
    }
    w.checked_mul(1000)?.checked_add(f)
}

/// A PCIe link speed value: `current_link_speed` / `max_link_speed` as kernels since 5.7
/// print it (`pci_speed_string()`: `"32.0 GT/s PCIe"`), as older kernels did (`"32 GT/s"`,
/// `"2.5 GT/s"`), or as a BOM writes it (`"32.0 GT/s"`). `Unknown` (5.7+) and `Unknown
/// speed` (older) are `None`: the link is down or the speed is not one the kernel names.
pub fn link_speed(text: &str) -> Result<Option<LinkSpeed>, ValueError> {
    const WHAT: &str = "a PCIe link speed (\"32.0 GT/s PCIe\", \"32 GT/s\" or \"Unknown\")";
    let line = one_line(text, WHAT)?;
    if line == "Unknown" || line == "Unknown speed" {
        return Ok(None);
    }
    let rest = line.strip_suffix(" PCIe").unwrap_or(line);
    let num = rest.strip_suffix(" GT/s").ok_or_else(|| bad(WHAT, text))?;
    let v = milli(num).ok_or_else(|| bad(WHAT, text))?;
    if v == 0 {
        return Err(bad(WHAT, text));
    }
    Ok(Some(LinkSpeed(v)))
}

/// One AER counter file (`aer_dev_correctable`, `aer_dev_fatal`, `aer_dev_nonfatal`):
/// one `"%s %llu\n"` line per error bit, then `TOTAL_ERR_COR` / `TOTAL_ERR_FATAL` /
/// `TOTAL_ERR_NONFATAL` (`drivers/pci/pcie/aer.c`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AerCounters {
    /// Each error bit's name and count, in file order (zeros included).
    pub bits: Vec<(String, u64)>,
    /// The `TOTAL_ERR_*` line: error messages counted (may be below the bits' sum).
    pub total: u64,
}

impl AerCounters {
    /// The bits with a non-zero count, as `Name N` words.
    pub fn nonzero(&self) -> Vec<String> {
        self.bits
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(b, n)| format!("{b} {n}"))
            .collect()
    }
}

/// Parses one AER counter file.
pub fn aer_counters(text: &str) -> Result<AerCounters, ValueError> {
    const WHAT: &str = "AER counters (\"<name> <count>\" lines ending in TOTAL_ERR_*)";
    let mut out = AerCounters::default();
    let mut total = None;
    let body = text.strip_suffix('\n').ok_or_else(|| bad(WHAT, text))?;
    for line in body.split('\n') {
        if total.is_some() {
            return Err(ValueError(format!(
                "line {line:?} after the TOTAL_ERR_* line; expected {WHAT}"
            )));
        }
        let (name, count) = line.split_once(' ').ok_or_else(|| bad(WHAT, line))?;
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"_[]".contains(&c));
        let n: u64 = if name_ok && !count.is_empty() && count.bytes().all(|c| c.is_ascii_digit()) {
            count.parse().map_err(|_| bad(WHAT, line))?
        } else {
            return Err(bad(WHAT, line));
        };
        if name.starts_with("TOTAL_ERR_") {
            total = Some(n);
        } else {
            out.bits.push((name.to_string(), n));
        }
    }
    out.total = total.ok_or_else(|| bad(WHAT, text))?;
    Ok(out)
}

/// An InfiniBand `"%d: %s\n"` enumeration (`ports/N/state`, `phys_state`, `node_type`):
/// the number and the name (`4: ACTIVE`, `5: LinkUp`, `1: DOWN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbEnum {
    pub code: u32,
    pub name: String,
}

impl fmt::Display for IbEnum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.name)
    }
}

/// Parses `"4: ACTIVE\n"` (`drivers/infiniband/core/sysfs.c`).
pub fn ib_enum(text: &str) -> Result<IbEnum, ValueError> {
    const WHAT: &str = "an InfiniBand state (\"<n>: <NAME>\")";
    let line = one_line(text, WHAT)?;
    let (code, name) = line.split_once(": ").ok_or_else(|| bad(WHAT, text))?;
    if code.is_empty()
        || code.len() > 3
        || !code.bytes().all(|c| c.is_ascii_digit())
        || name.is_empty()
        || !name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b' ')
    {
        return Err(bad(WHAT, text));
    }
    Ok(IbEnum {
        code: code.parse().map_err(|_| bad(WHAT, text))?,
        name: name.to_string(),
    })
}

/// An InfiniBand port `rate`: `"%d%s Gb/sec (%dX%s)\n"` (`rate_show()`:
/// `400 Gb/sec (4X NDR)`, `2.5 Gb/sec (1X SDR)`, `56 Gb/sec (4X FDR)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbRate {
    /// Tenths of Gb/s (400 Gb/s is 4000).
    pub tenth_gbps: u64,
    pub lanes: u32,
    /// The per-lane speed name (`NDR`, `HDR`, `SDR`...).
    pub speed: String,
}

impl IbRate {
    /// The rate in Gb/s as the kernel prints it (`400`, `2.5`).
    pub fn gbps(&self) -> String {
        if self.tenth_gbps.is_multiple_of(10) {
            format!("{}", self.tenth_gbps / 10)
        } else {
            format!("{}.{}", self.tenth_gbps / 10, self.tenth_gbps % 10)
        }
    }
}

impl fmt::Display for IbRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} Gb/sec ({}X {})", self.gbps(), self.lanes, self.speed)
    }
}

fn tenths(num: &str) -> Option<u64> {
    let (whole, frac) = match num.split_once('.') {
        Some((w, "5")) => (w, 5),
        Some(_) => return None,
        None => (num, 0),
    };
    if whole.is_empty() || whole.len() > 9 || !whole.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    whole
        .parse::<u64>()
        .ok()?
        .checked_mul(10)?
        .checked_add(frac)
}

/// Parses an InfiniBand port `rate` file, or a BOM's minimum rate (`"400 Gb/sec"`, with or
/// without the lanes part).
pub fn ib_rate(text: &str) -> Result<IbRate, ValueError> {
    const WHAT: &str = "an InfiniBand rate (\"400 Gb/sec (4X NDR)\")";
    let line = one_line(text, WHAT)?;
    let (num, rest) = line.split_once(" Gb/sec").ok_or_else(|| bad(WHAT, text))?;
    let tenth_gbps = tenths(num).ok_or_else(|| bad(WHAT, text))?;
    if rest.is_empty() {
        return Ok(IbRate {
            tenth_gbps,
            lanes: 0,
            speed: String::new(),
        });
    }
    let inner = rest
        .strip_prefix(" (")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(WHAT, text))?;
    let (lanes, speed) = inner.split_once('X').ok_or_else(|| bad(WHAT, text))?;
    let speed = speed.strip_prefix(' ').unwrap_or(speed);
    if lanes.is_empty()
        || lanes.len() > 2
        || !lanes.bytes().all(|c| c.is_ascii_digit())
        || !speed.bytes().all(|c| c.is_ascii_alphanumeric())
    {
        return Err(bad(WHAT, text));
    }
    Ok(IbRate {
        tenth_gbps,
        lanes: lanes.parse().map_err(|_| bad(WHAT, text))?,
        speed: speed.to_string(),
    })
}

/// A space-padded string attribute (NVMe `model`, `serial`, `firmware_rev`: `"%.*s\n"`
/// over the Identify field, padded with spaces by the drive; also `fw_ver`, `operstate`,
/// `link_layer`): the value with its newline and trailing spaces removed. Control
/// characters (other than the padding) are an error.
pub fn padded(text: &str, what: &str) -> Result<String, ValueError> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let v = line.trim_end_matches(' ');
    if v.is_empty() || v.chars().any(char::is_control) {
        return Err(bad(what, text));
    }
    Ok(v.to_string())
}

/// The NVIDIA kernel module's flavour as the driver names itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverFlavour {
    /// `NVIDIA UNIX Open Kernel Module for x86_64 ...`.
    Open,
    /// `NVIDIA UNIX x86_64 Kernel Module ...`.
    Proprietary,
}

/// `/proc/driver/nvidia/version` (`nv_procfs_read_version`): the `NVRM version:` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverVersion {
    pub flavour: DriverFlavour,
    /// `570.172.08`.
    pub version: String,
    /// The whole NVRM id after `NVRM version: `.
    pub nvrm: String,
}

/// Whether `s` looks like an NVIDIA driver version: `N.N` or `N.N.N`, digits only.
pub fn is_driver_version(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.len() <= 4 && p.bytes().all(|c| c.is_ascii_digit()))
}

/// Parses `/proc/driver/nvidia/version`. The flavour is the word `Open` in the module's
/// name; the version is the first `N.N[.N]` word after `Module`.
pub fn nvidia_version(text: &str) -> Result<DriverVersion, ValueError> {
    const WHAT: &str =
        "an NVRM version line (\"NVRM version: NVIDIA UNIX ... Kernel Module  <version> ...\")";
    let first = text.split('\n').next().unwrap_or("");
    let nvrm = first
        .strip_prefix("NVRM version: ")
        .ok_or_else(|| bad(WHAT, first))?;
    if nvrm.chars().any(|c| c != '\t' && c.is_control()) {
        return Err(bad(WHAT, first));
    }
    let words: Vec<&str> = nvrm.split_whitespace().collect();
    let module_at = words
        .iter()
        .position(|w| *w == "Module")
        .ok_or_else(|| bad(WHAT, first))?;
    if words.first() != Some(&"NVIDIA") {
        return Err(bad(WHAT, first));
    }
    let name = words.get(..module_at).unwrap_or_default();
    let flavour = if name.contains(&"Open") {
        DriverFlavour::Open
    } else {
        DriverFlavour::Proprietary
    };
    let version = words
        .iter()
        .skip(module_at + 1)
        .find(|w| is_driver_version(w))
        .ok_or_else(|| bad(WHAT, first))?;
    Ok(DriverVersion {
        flavour,
        version: (*version).to_string(),
        nvrm: nvrm.to_string(),
    })
}

/// Key/value lines as NVIDIA's procfs writes them (`"Key: \t value\n"`): keys and values
/// trimmed. A line without `:` is an error naming it.
fn key_values(text: &str, what: &str) -> Result<Vec<(String, String)>, ValueError> {
    let body = text.strip_suffix('\n').unwrap_or(text);
    if body.is_empty() {
        return Err(bad(what, text));
    }
    body.split('\n')
        .map(|line| {
            let (k, v) = line.split_once(':').ok_or_else(|| bad(what, line))?;
            let k = k.trim();
            if k.is_empty() || k.chars().any(char::is_control) {
                return Err(bad(what, line));
            }
            let v = v.trim_matches(|c| c == ' ' || c == '\t');
            if v.chars().any(char::is_control) {
                return Err(bad(what, line));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// One GPU as the driver sees it: `/proc/driver/nvidia/gpus/<bdf>/information`
/// (`nv_procfs_read_gpu_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInformation {
    pub model: String,
    /// `Bus Location`: the PCI address (`0000:1b:00.0`).
    pub bus_location: String,
    pub minor: Option<u32>,
    pub uuid: Option<String>,
    pub vbios: Option<String>,
    /// `GPU Firmware` (GSP), when the driver reports one.
    pub firmware: Option<String>,
    /// `GPU Excluded: Yes` (`NVreg_ExcludedGpus`): present but not usable.
    pub excluded: bool,
}

/// Parses a GPU `information` file; keys are matched by name, not line number.
pub fn gpu_information(text: &str) -> Result<GpuInformation, ValueError> {
    const WHAT: &str = "a GPU information file (\"Key: \\t value\" lines)";
    let kv = key_values(text, WHAT)?;
    let get = |k: &str| kv.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
    let need = |k: &str| {
        get(k).ok_or_else(|| ValueError(format!("no {k:?} line in a GPU information file")))
    };
    let minor = match get("Device Minor") {
        Some(m) => Some(
            m.parse::<u32>()
                .map_err(|_| bad("a device minor number", &m))?,
        ),
        None => None,
    };
    let excluded = match get("GPU Excluded").as_deref() {
        None | Some("No") => false,
        Some("Yes") => true,
        Some(other) => return Err(bad("Yes or No (GPU Excluded)", other)),
    };
    let bus_location = need("Bus Location")?;
    if !is_pci_address(&bus_location) {
        return Err(bad("a PCI address (Bus Location)", &bus_location));
    }
    Ok(GpuInformation {
        model: need("Model")?,
        bus_location,
        minor,
        uuid: get("GPU UUID"),
        vbios: get("Video BIOS"),
        firmware: get("GPU Firmware"),
        excluded,
    })
}

/// One NVSwitch as `nvidia-nvswitch` sees it (`procfs_nvswitch.c`): `BIOS Version: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvSwitchInformation {
    /// `96.10.6d.00.01`, or `N/A`.
    pub bios_version: String,
}

/// Parses an NVSwitch `information` file.
pub fn nvswitch_information(text: &str) -> Result<NvSwitchInformation, ValueError> {
    let kv = key_values(text, "an NVSwitch information file (\"BIOS Version: ...\")")?;
    let bios_version = kv
        .iter()
        .find(|(k, _)| k == "BIOS Version")
        .map(|(_, v)| v.clone())
        .ok_or_else(|| {
            ValueError("no \"BIOS Version\" line in an NVSwitch information file".into())
        })?;
    Ok(NvSwitchInformation { bios_version })
}

/// Whether `s` is a PCI address as sysfs spells it (`"%04x:%02x:%02x.%1x"`, lower case).
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| {
        b.get(r).is_some_and(|x| {
            x.iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        })
    };
    b.len() == 12
        && hex(0..4)
        && b.get(4) == Some(&b':')
        && hex(5..7)
        && b.get(7) == Some(&b':')
        && hex(8..10)
        && b.get(10) == Some(&b'.')
        && b.get(11).is_some_and(|c| (b'0'..=b'7').contains(c))
}

/// The active lockdown mode in `/sys/kernel/security/lockdown`
/// (`none [integrity] confidentiality`): the bracketed word.
pub fn lockdown(text: &str) -> Result<String, ValueError> {
    const WHAT: &str = "a lockdown list (\"none [integrity] confidentiality\")";
    let line = one_line(text, WHAT)?;
    let mut active = None;
    for w in line.split(' ') {
        if let Some(inner) = w.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            if active.is_some() || inner.is_empty() {
                return Err(bad(WHAT, text));
            }
            active = Some(inner);
        } else if w.is_empty() || !w.bytes().all(|c| c.is_ascii_lowercase()) {
            return Err(bad(WHAT, text));
        }
    }
    let a = active.ok_or_else(|| bad(WHAT, text))?;
    if !a.bytes().all(|c| c.is_ascii_lowercase()) {
        return Err(bad(WHAT, text));
    }
    Ok(a.to_string())
}

/// A boolean EFI variable read through efivarfs (`SecureBoot-8be4df61-...`): four bytes of
/// little-endian attributes, then the one-byte value (0 or 1).
pub fn efi_bool(bytes: &[u8]) -> Result<bool, ValueError> {
    match bytes {
        [_, _, _, _, 0] => Ok(false),
        [_, _, _, _, 1] => Ok(true),
        _ => Err(ValueError(format!(
            "{} byte(s) {} are not a boolean EFI variable (4 attribute bytes, then 00 or 01)",
            bytes.len(),
            crate::util::hex(bytes.get(..bytes.len().min(16)).unwrap_or_default())
        ))),
    }
}

/// A module's `taint` file (`module_flags_taint()`: `P`, `O`, `E`... then `\n`); in-tree
/// modules print just the newline.
pub fn module_taint(text: &str) -> Result<String, ValueError> {
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("module taint letters", text))?;
    if !line.bytes().all(|c| c.is_ascii_uppercase()) || line.len() > 20 {
        return Err(bad("module taint letters", text));
    }
    Ok(line.to_string())
}

/// One package of dpkg's status database.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DpkgPackage {
    pub package: String,
    /// `install ok installed`, ...
    pub status: String,
    pub version: String,
    /// The `Provides:` names (without versions).
    pub provides: Vec<String>,
}

impl DpkgPackage {
    /// Whether dpkg has it installed (`Status: install ok installed` or `hold ok
    /// installed`).
    pub fn installed(&self) -> bool {
        self.status.ends_with(" ok installed")
    }

    /// The upstream version: the Debian version without its epoch (`N:`) and revision (the
    /// part after the last `-`).
    pub fn upstream_version(&self) -> &str {
        let v = self
            .version
            .split_once(':')
            .map_or(self.version.as_str(), |(_, r)| r);
        v.rsplit_once('-').map_or(v, |(u, _)| u)
    }
}

/// Parses dpkg's status file (`/var/lib/dpkg/status`, deb822 stanzas separated by empty
/// lines; continuation lines start with a space or tab). Only `Package`, `Status`,
/// `Version` and `Provides` are kept. A line that is neither a field nor a continuation,
/// or a stanza without `Package`, is an error naming its line.
pub fn dpkg_status(text: &str) -> Result<Vec<DpkgPackage>, ValueError> {
    let mut out = Vec::new();
    let mut cur: Option<DpkgPackage> = None;
    let mut start = 0;
    let mut in_field = false;
    let finish = |cur: &mut Option<DpkgPackage>,
                  out: &mut Vec<DpkgPackage>,
                  start: usize|
     -> Result<(), ValueError> {
        if let Some(p) = cur.take() {
            if p.package.is_empty() {
                return Err(ValueError(format!(
                    "the stanza at line {start} has no Package field"
                )));
            }
            out.push(p);
        }
        Ok(())
    };
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            finish(&mut cur, &mut out, start)?;
            in_field = false;
            continue;
        }
        if line.starts_with(' ') || line.starts_with('\t') {
            if !in_field {
                return Err(ValueError(format!(
                    "line {n}: a continuation line outside a field"
                )));
            }
            continue;
        }
        let (name, value) = line.split_once(':').ok_or_else(|| {
            ValueError(format!(
                "line {n}: {:?} is not a \"Field: value\" line",
                line.chars().take(80).collect::<String>()
            ))
        })?;
        if name.is_empty()
            || !name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            return Err(ValueError(format!(
                "line {n}: {:?} is not a field name",
                name.chars().take(80).collect::<String>()
            )));
        }
        in_field = true;
        let p = cur.get_or_insert_with(|| {
            start = n;
            DpkgPackage::default()
        });
        let value = value.trim();
        match name {
            "Package" => p.package = value.to_string(),
            "Status" => p.status = value.to_string(),
            "Version" => p.version = value.to_string(),
            "Provides" => {
                p.provides = value
                    .split(',')
                    .filter_map(|x| x.split_whitespace().next())
                    .map(str::to_string)
                    .collect();
            }
            _ => {}
        }
    }
    finish(&mut cur, &mut out, start)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
