//! Ports for the processes the harness starts (etcd, kube-apiserver, Kueue, an orchestrator's
//! probes), which bind them later than they are chosen.
//!
//! Binding port 0 gives a port from the kernel's ephemeral range, the same range every outgoing
//! connection takes its local port from. Between choosing such a port and a component binding it,
//! any of the many connections a test run opens can take it: kube-apiserver then exits with
//! "address already in use". A port below that range is never handed out by the kernel, so only
//! another harness choosing at random could take it, and it checks with a bind first.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;

/// Where the search starts: below it are the ports well-known services use.
const LOWEST: u16 = 10_000;

/// The kernel's ephemeral range when it cannot be read: Linux's default.
const EPHEMERAL_LOW: u16 = 32_768;

/// A port on 127.0.0.1 that nothing listens on now and that no outgoing connection will be
/// given: below the ephemeral range, from a random starting point.
pub fn free_port() -> anyhow::Result<u16> {
    let low = ephemeral_low().unwrap_or(EPHEMERAL_LOW);
    let Some(span) = low.checked_sub(LOWEST).filter(|span| *span > 0) else {
        // An ephemeral range that starts this low leaves no port outside it.
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    };
    let start = (random() % u64::from(span)) as u16;
    (0..span)
        .map(|i| LOWEST + (start + i) % span)
        .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .ok_or_else(|| anyhow::anyhow!("no free port on 127.0.0.1 between {LOWEST} and {low}"))
}

/// The first port of the kernel's ephemeral range (`net.ipv4.ip_local_port_range`).
fn ephemeral_low() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    parse_low(&range)
}

fn parse_low(range: &str) -> Option<u16> {
    range.split_whitespace().next()?.parse().ok()
}

/// A random number from the standard library's per-process hash keys, mixed with the time, so
/// two harnesses started together start their searches apart.
fn random() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_low_end_of_the_kernels_range() {
        assert_eq!(parse_low("32768\t60999\n"), Some(32768));
        assert_eq!(parse_low(""), None);
    }

    #[test]
    fn a_port_is_free_and_below_the_ephemeral_range() {
        let low = ephemeral_low().unwrap_or(EPHEMERAL_LOW);
        let port = free_port().unwrap();
        if low > LOWEST {
            assert!((LOWEST..low).contains(&port), "{port} outside {LOWEST}..{low}");
        }
        TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    }
}
