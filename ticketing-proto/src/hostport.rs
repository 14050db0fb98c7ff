//! `host:port` addresses (docs/client.md, Rust API; docs/security.md, TLS):
//! the one place that splits them — for the client's address check and for
//! the TLS server name that the client and the peer transport verify.

/// The host and port of `host:port`: the host without the brackets of an
/// IPv6 literal (`[::1]:5225` → `::1`), the port in 1–65535. `None` when
/// there is no colon, the host is empty or the port is not 1–65535.
///
/// ```
/// use ticketing_proto::hostport::split;
/// assert_eq!(split("[::1]:5225"), Some(("::1", 5225)));
/// assert_eq!(split("example.com:0"), None);
/// ```
pub fn split(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = unbracket(host);
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    (!host.is_empty()).then_some((host, port))
}

/// The host to name in TLS for `addr` (`host:port`, brackets of an IPv6
/// literal removed; an address without a colon is taken as a bare host).
///
/// ```
/// assert_eq!(ticketing_proto::hostport::tls_host("[::1]:5225"), "::1");
/// assert_eq!(ticketing_proto::hostport::tls_host("db.example:5226"), "db.example");
/// ```
pub fn tls_host(addr: &str) -> &str {
    unbracket(addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr))
}

fn unbracket(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits() {
        assert_eq!(split("127.0.0.1:5225"), Some(("127.0.0.1", 5225)));
        assert_eq!(split("[::1]:1"), Some(("::1", 1)));
        assert_eq!(split("h:65535"), Some(("h", 65535)));
        for bad in ["", "h", ":5225", "[]:5225", "h:", "h:0", "h:65536", "h:x"] {
            assert_eq!(split(bad), None, "{bad:?}");
        }
        assert_eq!(tls_host("example.com:5225"), "example.com");
        assert_eq!(tls_host("bare"), "bare");
    }
}
