//! The kernel's device events (`NETLINK_KOBJECT_UEVENT`, netlink(7)) as a wake-up for a
//! wait: a partition that appears ends the wait for it at once instead of at the next
//! periodic scan.
//!
//! Contract: [`Uevents::open`] binds a socket to the kernel's own multicast group (1: what
//! the kernel sends, not udev's re-broadcasts), close-on-exec and non-blocking.
//! [`Uevents::wait`] waits up to a timeout for an event that `want` accepts (the event's
//! bytes: its `ACTION@DEVPATH` header and NUL-separated `KEY=value` fields; [`is_block`]
//! accepts the block subsystem's), taking every event queued on the way. `ENOBUFS` (the
//! kernel dropped events for a full buffer) counts as an accepted event: what was dropped
//! may have been one. A socket that fails, or that `poll` calls ready with nothing to
//! take, ends the wait as [`Wake::Failed`] (never a loop that spins). An event is a hint
//! only: a caller scans again for what it waits for and keeps its periodic scan, so an
//! event missed or forged costs at most one interval and never decides anything.
//!
//! Limits: the socket's receive buffer is the kernel's default (`net.core.rmem_default`);
//! a burst beyond it is the `ENOBUFS` above. At most [`DRAIN_MAX`] events are taken per
//! wake-up, so a flood of events the caller does not want cannot hold the wait past its
//! timeout.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    bind, recv, socket, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType,
};

use super::SysError;

/// The kernel's uevent multicast group.
const KERNEL_GROUP: u32 = 1;
/// Bytes read of one event (the kernel's `UEVENT_BUFFER_SIZE` is 2048, plus the header).
const EVENT_MAX: usize = 4096;
/// Most events taken per wake-up before the deadline is looked at again.
pub const DRAIN_MAX: usize = 1024;

/// How a [`Uevents::wait`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// An event `want` accepted came (or events were dropped).
    Event,
    /// The timeout passed without one.
    Timeout,
    /// The socket failed: the caller waits without it.
    Failed(SysError),
}

/// A socket on the kernel's uevents.
#[derive(Debug)]
pub struct Uevents {
    fd: OwnedFd,
}

impl Uevents {
    /// Opens and binds the socket.
    pub fn open() -> Result<Uevents, SysError> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkKObjectUEvent,
        )
        .map_err(|e| SysError::new("socket", "NETLINK_KOBJECT_UEVENT", e))?;
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, KERNEL_GROUP))
            .map_err(|e| SysError::new("bind", "NETLINK_KOBJECT_UEVENT group 1", e))?;
        Ok(Uevents { fd })
    }

    /// Waits up to `timeout` for an event `want` accepts, taking the events queued.
    pub fn wait(&self, timeout: Duration, want: impl Fn(&[u8]) -> bool) -> Wake {
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; EVENT_MAX];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Wake::Timeout;
            }
            let t = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, t) {
                Ok(0) | Err(Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => return Wake::Failed(SysError::new("poll", "uevent socket", e)),
            }
            let (mut hit, mut took) = (false, false);
            for _ in 0..DRAIN_MAX {
                match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                    Ok(n) => hit |= want(buf.get(..n).unwrap_or_default()),
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    Err(Errno::ENOBUFS) => hit = true,
                    Err(e) => return Wake::Failed(SysError::new("recv", "uevent socket", e)),
                }
                took = true;
            }
            if hit {
                return Wake::Event;
            }
            // Ready with nothing to take would make every poll return at once: a socket
            // in that state is given up rather than spun on.
            if !took {
                return Wake::Failed(SysError::new(
                    "recv",
                    "uevent socket (ready but empty)",
                    Errno::EAGAIN,
                ));
            }
        }
    }
}

/// Whether the event is the block subsystem's (a disk or a partition came or went).
pub fn is_block(event: &[u8]) -> bool {
    event.split(|b| *b == 0).any(|f| f == b"SUBSYSTEM=block")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_events_are_told_by_their_subsystem_field() {
        let add = b"add@/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p1\0\
            ACTION=add\0DEVPATH=/devices/pci0000:00/0000:00:04.0/nvme/nvme0/nvme0n1/nvme0n1p1\0\
            SUBSYSTEM=block\0DEVNAME=nvme0n1p1\0DEVTYPE=partition\0PARTN=1\0SEQNUM=1203\0";
        assert!(is_block(add));
        let mem = b"change@/devices/virtual/mem/null\0ACTION=change\0\
            DEVPATH=/devices/virtual/mem/null\0SUBSYSTEM=mem\0DEVNAME=null\0SEQNUM=9\0";
        assert!(!is_block(mem));
        // The word elsewhere than as the subsystem field is not enough.
        assert!(!is_block(
            b"add@/x\0DEVNAME=SUBSYSTEM=block\0SUBSYSTEM=blocks\0"
        ));
        assert!(!is_block(b""));
    }

    /// A real event wakes the wait: the kernel sends a `change` for `/dev/null` when
    /// root writes `change` to its `uevent` file; a wait for events nothing sends ends at
    /// its timeout.
    #[test]
    fn a_kernel_event_wakes_the_wait_and_the_timeout_ends_it() {
        let u = Uevents::open().expect("a NETLINK_KOBJECT_UEVENT socket (run as root)");
        assert_eq!(
            u.wait(Duration::from_millis(50), |e| e.starts_with(b"never@")),
            Wake::Timeout
        );
        std::fs::write("/sys/class/mem/null/uevent", "change").expect("root writes uevent");
        let null = |e: &[u8]| {
            e.starts_with(b"change@")
                && e.split(|b| *b == 0)
                    .any(|f| f == b"DEVPATH=/devices/virtual/mem/null")
        };
        assert_eq!(u.wait(Duration::from_secs(30), null), Wake::Event);
    }
}
