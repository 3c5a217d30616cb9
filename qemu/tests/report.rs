//! The report leaving real boots: the short console line of a 40-module node, the
//! timeline drawn from it, the metrics and NFD files in place in the new root after
//! `switch_root`, and the metrics served by Debian's prometheus-node-exporter, scraped by
//! a local Prometheus (loopback only) that evaluates the shipped rules.
// Test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do
// (a failure should stop the test loudly); the workspace denies these outside tests.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: helpers outside `#[test]` functions unwrap, index and panic as the tests do"
)]

use sha2::Digest;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qemu::rootfs::section;
use qemu::scenario::Name;
use validator::report::{console, Decision, Fault};
use validator::runtime::modload::ModStatus;

/// A process (and its group) killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let pgid = nix::unistd::Pid::from_raw(self.0.id().cast_signed());
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

fn spawn(cmd: &mut Command, log: &Path) -> Proc {
    let f = std::fs::File::create(log).unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (run scripts/provision)"));
    Proc(child)
}

/// A free loopback port (bound, then released for the server to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on 127.0.0.1:port; the body, or `None` when not answering yet.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200")
        .then(|| body.to_string())
        .or_else(|| head.starts_with("HTTP/1.1 200").then(|| body.to_string()))
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Polls `f` every 500 ms for at most `secs` seconds.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not within {secs} s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn rsvg_png(svg: &Path) -> Vec<u8> {
    let png = svg.with_extension("png");
    let st = Command::new("rsvg-convert")
        .arg("-o")
        .arg(&png)
        .arg(svg)
        .status()
        .unwrap_or_else(|e| panic!("rsvg-convert: {e} (install librsvg2-bin: scripts/provision)"));
    assert!(st.success(), "rsvg-convert {}", svg.display());
    std::fs::read(&png).unwrap()
}

fn work_dir(name: &str) -> PathBuf {
    qemu::paths::run_dir(name).unwrap()
}

/// The 40-module node: the console gets one line under 1 KiB while the report is many
/// times that; the timeline shows every stage and module; the metrics file from the root
/// passes promtool's lint; the NFD file is in place in the new root.
#[test]
fn forty_module_node_reports_in_one_short_line() {
    let o = qemu::catalogue::run_named(Name::Modules40);
    let r = o.reached_root();
    assert_eq!(r.decision, Decision::Pass, "{:?}", r.reason);
    for m in qemu::scenario::FORTY_MODULES {
        let got = r
            .module(m)
            .unwrap_or_else(|| panic!("{m} not in the report"));
        assert!(
            matches!(got.status, ModStatus::Loaded | ModStatus::Builtin),
            "{got:?}"
        );
    }
    let loaded = r
        .modules
        .iter()
        .filter(|m| m.status == ModStatus::Loaded)
        .count();
    assert!(loaded >= 40, "{loaded} loaded");
    // On two vCPUs (modules loading in parallel, some judged ahead of their
    // dependencies): each loaded module's recorded digest, the one measured, is its file's.
    let kernel = qemu::paths::kernel("default").unwrap();
    let tree = mkinitramfs::closure::KernelTree::open(&kernel.root).unwrap();
    for m in r.modules.iter().filter(|m| m.status == ModStatus::Loaded) {
        let path = tree.moddir.join(m.path.as_deref().unwrap());
        let want = validator::util::hex(&sha2::Sha256::digest(std::fs::read(&path).unwrap()));
        assert_eq!(m.sha256.as_deref(), Some(want.as_str()), "{}", m.name);
    }
    // One short line; the full report stays in /run.
    let raw = o
        .console
        .lines()
        .filter(|l| l.contains(console::PREFIX))
        .collect::<Vec<_>>();
    assert_eq!(raw.len(), 1, "{raw:?}");
    let line_len = raw[0].trim_end_matches('\r').len() + 1;
    let json_len = r.to_json().len() + 1;
    eprintln!("console line {line_len} bytes; report {json_len} bytes; {loaded} modules loaded");
    assert!(line_len <= console::LINE_MAX);
    assert!(
        json_len > 10 * line_len,
        "report {json_len} vs line {line_len}"
    );
    let l = console::find(&o.console).unwrap();
    assert_eq!((l.decision.as_str(), l.fault.as_str()), ("pass", "none"));
    assert_eq!(
        o.root_report.as_ref(),
        Some(r),
        "/run vs the console's report"
    );
    // Node identity from SMBIOS and the kernel.
    assert_eq!(r.node.product_serial.as_deref(), Some("QEMU-NODE-0001"));
    assert_eq!(r.node.board_serial.as_deref(), Some("QEMU-BOARD-0001"));
    assert_eq!(r.node.boot_id.as_deref().map(str::len), Some(36));
    assert!(r.peak_rss_bytes.is_some_and(|b| b > 100_000), "{r:?}");
    // The timeline: every stage and module named, rendered to a real picture.
    let dir = work_dir("timeline");
    let svg = validator::report::timeline::svg(r);
    for s in &r.stages {
        assert!(
            svg.contains(&format!(">stage {}</text>", s.name.name())),
            "{:?}",
            s.name
        );
    }
    for m in &r.modules {
        assert!(svg.contains(&format!(">{}</text>", m.name)), "{}", m.name);
    }
    let svg_path = dir.join("timeline.svg");
    std::fs::write(&svg_path, &svg).unwrap();
    let png = rsvg_png(&svg_path);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    eprintln!(
        "timeline {}: {w}x{h}, {} bytes",
        svg_path.display(),
        png.len()
    );
    assert!(
        w >= 1000 && h >= 20 * u32::try_from(r.modules.len()).unwrap(),
        "{w}x{h}"
    );
    assert!(png.len() > 20_000, "{} bytes", png.len());
    if std::env::var_os("VALIDATOR_WRITE_EXAMPLES").is_some() {
        let docs = qemu::paths::workspace().join("docs/examples");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(docs.join("timeline-modules-40.svg"), &svg).unwrap();
    }
    // The metrics file in the new root, as node_exporter will read it.
    let metrics = section(&o.console, "METRICS").expect("metrics printed by the root");
    assert!(metrics.contains("validator_report_info{"), "{metrics}");
    let m = dir.join("validator.prom");
    std::fs::write(&m, &metrics).unwrap();
    let out = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&m).unwrap())
        .output()
        .expect("promtool (scripts/provision)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
    // The NFD file, parsed as nfd-worker reads it, and the links into /run.
    let nfd = section(&o.console, "NFD").expect("features printed by the root");
    let f = validator::formats::nfd::parse(&nfd).unwrap();
    let get = |n: &str| f.iter().find(|x| x.name == n).map(|x| x.value.as_str());
    assert_eq!(get("decision"), Some("pass"));
    assert_eq!(get("quarantine"), Some("false"));
    assert_eq!(get("image"), r.image_id.as_deref());
    let links = section(&o.console, "LINKS").unwrap();
    assert_eq!(links, "/run/validator/textfile\n/run/validator/nfd\n");
}

/// Debian's node exporter serves the textfile of a real boot (taken from its root) and
/// the textfile rendered from a real image-fault boot's report (that boot never reaches
/// a root, so the library renders it, as `validator report FILE --prometheus OUT` does);
/// a Prometheus on loopback scrapes both with the shipped rules: the info metric is there
/// and the image-fault alert fires for the second node only.
#[test]
fn node_exporter_and_prometheus_see_the_reports() {
    let bad = std::thread::spawn(|| qemu::catalogue::run_named(Name::TamperedModule));
    let good = qemu::catalogue::run_named(Name::Good);
    let bad = bad.join().unwrap();
    let good_metrics = section(&good.console, "METRICS").expect("metrics in the root");
    let br = bad.stopped();
    assert_eq!(br.fault, Some(Fault::Image));
    let bad_metrics = validator::report::prometheus::render(br);
    let dir = work_dir("fleet");
    let mut procs = Vec::new();
    let mut targets = Vec::new();
    for (name, text) in [("good", &good_metrics), ("bad", &bad_metrics)] {
        let d = dir.join(format!("textfile-{name}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("validator.prom"), text).unwrap();
        let port = free_port();
        procs.push(spawn(
            Command::new("prometheus-node-exporter")
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--collector.disable-defaults")
                .arg("--collector.textfile")
                .arg(format!("--collector.textfile.directory={}", d.display())),
            &dir.join(format!("node-exporter-{name}.log")),
        ));
        targets.push(port);
    }
    for port in &targets {
        let body = wait_for(30, "node exporter", || http_get(*port, "/metrics"));
        assert!(body.contains("validator_report_info{"), "{body}");
        assert!(
            body.lines().any(|l| l == "node_textfile_scrape_error 0"),
            "{body}"
        );
    }
    let rules = qemu::paths::workspace().join("examples/prometheus/validator.rules.yml");
    let cfg = dir.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: ['{}']\n\
             scrape_configs:\n  - job_name: node\n    static_configs:\n      \
             - targets: ['127.0.0.1:{}', '127.0.0.1:{}']\n",
            rules.display(),
            targets[0],
            targets[1]
        ),
    )
    .unwrap();
    let port = free_port();
    procs.push(spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}")),
        &dir.join("prometheus.log"),
    ));
    let q = format!("/api/v1/query?query={}", urlencode("validator_report_info"));
    let series = wait_for(90, "validator_report_info from both nodes", || {
        let v: serde_json::Value = serde_json::from_str(&http_get(port, &q)?).ok()?;
        let r = v["data"]["result"].as_array()?.clone();
        (r.len() == 2).then_some(r)
    });
    let decisions: Vec<&str> = series
        .iter()
        .filter_map(|s| s["metric"]["decision"].as_str())
        .collect();
    assert!(
        decisions.contains(&"pass") && decisions.contains(&"stop"),
        "{series:?}"
    );
    let bad_instance = format!("127.0.0.1:{}", targets[1]);
    let alert = wait_for(90, "ValidatorImageFault firing", || {
        let v: serde_json::Value = serde_json::from_str(&http_get(port, "/api/v1/alerts")?).ok()?;
        v["data"]["alerts"].as_array()?.iter().find_map(|a| {
            (a["labels"]["alertname"] == "ValidatorImageFault" && a["state"] == "firing")
                .then(|| a.clone())
        })
    });
    assert_eq!(
        alert["labels"]["instance"],
        bad_instance.as_str(),
        "{alert}"
    );
    assert_eq!(
        alert["labels"]["image"],
        br.image_id.as_deref().unwrap(),
        "{alert}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&http_get(port, "/api/v1/alerts").unwrap()).unwrap();
    let firing: Vec<&serde_json::Value> = v["data"]["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["labels"]["instance"] != bad_instance.as_str())
        .collect();
    assert!(firing.is_empty(), "alerts for the good node: {firing:?}");
    drop(procs);
}
