//! Which addresses webhooks may reach. Unless the deployment allows private
//! addresses, a request never connects to a loopback, private, link-local or
//! otherwise internal address: IP-literal hosts are checked before the
//! request, and DNS names are resolved here and their internal addresses
//! dropped, so a name that resolves to 127.0.0.1 (or is rebound to it after
//! the endpoint was created) is refused at connect time. The ranges match
//! `holdfast.is_private_host` in sql/0007_webhooks.sql.

use std::net::{IpAddr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// True for loopback, private, shared (CGNAT), link-local, unspecified,
/// benchmarking, multicast and reserved addresses, and for IPv4-mapped and
/// NAT64 IPv6 addresses (they can reach any IPv4 address).
pub fn is_private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            a == 0
                || v4.is_private()
                || v4.is_loopback()
                || v4.is_link_local()
                || (a == 100 && (b & 0xc0) == 64)
                || (a == 192 && b == 0 && c == 0)
                || (a == 198 && (b & 0xfe) == 18)
                || a >= 224
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.to_ipv4_mapped().is_some()
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0])
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xff00) == 0xff00
        }
    }
}

/// Refuse a URL whose host is an internal IP literal (names are checked by
/// [`PublicOnlyResolver`] when they are resolved).
pub fn check_literal_host(url: &Url) -> Result<(), String> {
    // The URL parser has already normalised IPv4 spellings (`127.1`,
    // `2130706433`) to dotted quads; IPv6 literals keep their brackets.
    let host = url.host_str().ok_or("url has no host")?;
    let Ok(ip) = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    else {
        return Ok(());
    };
    if is_private_ip(ip) {
        return Err(format!(
            "{ip} is a private or loopback address, which this deployment does not allow"
        ));
    }
    Ok(())
}

/// A DNS resolver that returns only public addresses.
pub struct PublicOnlyResolver;

impl Resolve for PublicOnlyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| !is_private_ip(addr.ip()))
                .collect();
            if public.is_empty() {
                return Err(format!(
                    "{host} resolves only to private or loopback addresses, \
                     which this deployment does not allow"
                )
                .into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_private_and_public_ones_are_not() {
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.168.0.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "fd00::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(is_private_ip(ip.parse().unwrap()), "{ip} is internal");
        }
        for ip in [
            "1.1.1.1",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
        ] {
            assert!(!is_private_ip(ip.parse().unwrap()), "{ip} is public");
        }
    }

    #[test]
    fn literal_hosts_are_checked_in_every_spelling() {
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0x7f.0.0.1/",
            "http://[::1]/",
        ] {
            let url: Url = url.parse().unwrap();
            assert!(check_literal_host(&url).is_err(), "{url}");
        }
        assert!(check_literal_host(&"http://example.com/".parse().unwrap()).is_ok());
        assert!(check_literal_host(&"http://1.1.1.1/".parse().unwrap()).is_ok());
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused() {
        let error = match PublicOnlyResolver
            .resolve("localhost".parse().unwrap())
            .await
        {
            Ok(addrs) => panic!("resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(e) => e.to_string(),
        };
        assert!(error.contains("private or loopback"), "{error}");
    }
}
