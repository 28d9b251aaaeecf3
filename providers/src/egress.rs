//! The egress policy: which addresses an outbound request that a tenant or a
//! model can aim may reach. One policy serves every such kind of request
//! ([`EgressKind`]): `web_fetch`, MCP servers, webhooks, machine wake URLs,
//! agent-chosen model base URLs and the URLs of image and document blocks. The operator's own endpoints
//! (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, the database) are trusted and
//! do not go through it.
//!
//! The rule: an address in a special-purpose range of the IANA IPv4 and IPv6
//! Special-Purpose Address Registries that is not globally reachable
//! (loopback, private use, link-local, shared CGNAT space, documentation,
//! benchmarking, reserved, ...), multicast, broadcast, or deprecated
//! site-local is refused, unless the operator allows it for that kind with
//! `HOLDFAST_EGRESS_ALLOW` ([`EgressPolicy::parse`]). IPv6 forms that carry
//! an IPv4 address (IPv4-mapped `::ffff:0:0/96`, IPv4-compatible `::/96`,
//! NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by that IPv4 address.
//!
//! How it is enforced: a host name is resolved here ([`EgressPolicy::resolve`]),
//! every address it resolves to is checked, and the connection goes to the
//! checked addresses (a reqwest [`Resolve`] implementation, so there is no
//! second lookup a rebinding DNS server could answer differently). An IP
//! literal never reaches a resolver, so [`EgressPolicy::check_url`] checks
//! it before the request and at every redirect hop. Clients for these kinds
//! ignore `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY` (`.no_proxy()`): a proxy
//! would resolve and connect on its own, past every check.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// The setting that allows special-purpose ranges per kind.
pub const EGRESS_ALLOW_VAR: &str = "HOLDFAST_EGRESS_ALLOW";
/// Deprecated: `true` means `web_fetch=*`.
pub const DEPRECATED_WEB_FETCH_ALLOW_PRIVATE: &str = "HOLDFAST_WEB_FETCH_ALLOW_PRIVATE";
/// Deprecated: `true` means `webhook=*`.
pub const DEPRECATED_WEBHOOK_ALLOW_PRIVATE: &str = "HOLDFAST_WEBHOOK_ALLOW_PRIVATE";

/// A kind of outbound request a tenant or a model can aim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EgressKind {
    /// The `web_fetch` tool: the model picks the URL.
    WebFetch,
    /// MCP servers of an agent's config (Streamable HTTP).
    Mcp,
    /// Webhook endpoints a project registers.
    Webhook,
    /// A machine's `wake_url`, POSTed by the API.
    Wake,
    /// An agent's own `model.base_url`.
    Model,
    /// The URL of an image or document block (`"source": {"type": "url"}`)
    /// in an input or a tool result: the model provider fetches it, so a
    /// self-hosted one would fetch it from inside the operator's network.
    ContentUrl,
}

impl EgressKind {
    pub const ALL: [EgressKind; 6] = [
        EgressKind::WebFetch,
        EgressKind::Mcp,
        EgressKind::Webhook,
        EgressKind::Wake,
        EgressKind::Model,
        EgressKind::ContentUrl,
    ];

    /// The kind's name in `HOLDFAST_EGRESS_ALLOW`.
    pub fn name(self) -> &'static str {
        match self {
            EgressKind::WebFetch => "web_fetch",
            EgressKind::Mcp => "mcp",
            EgressKind::Webhook => "webhook",
            EgressKind::Wake => "wake",
            EgressKind::Model => "model",
            EgressKind::ContentUrl => "content_url",
        }
    }
}

impl fmt::Display for EgressKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A special-purpose range, with the registry's name for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialRange {
    pub range: IpNet,
    pub name: &'static str,
}

/// Refused ranges, most specific first where they nest (the first match
/// names the range in messages). From the IANA IPv4 and IPv6 Special-Purpose
/// Address Registries (entries that are not globally reachable, or whose
/// reachability is N/A), plus multicast (RFC 5771, RFC 4291) and the
/// deprecated IPv6 site-local and IPv4-compatible blocks (RFC 3879, RFC 4291).
const REFUSED: &[(&str, &str)] = &[
    // IPv4
    ("0.0.0.0/8", "\"this network\""),
    ("10.0.0.0/8", "private-use"),
    ("100.64.0.0/10", "shared address space (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private-use"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ("192.168.0.0/16", "private-use"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "limited broadcast"),
    ("240.0.0.0/4", "reserved"),
    // IPv6
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy IPv6 prefix"),
    ("2001:2::/48", "benchmarking"),
    ("2001:db8::/32", "documentation"),
    ("2001::/32", "Teredo"),
    ("2001:10::/28", "deprecated ORCHID"),
    ("2001::/23", "IETF protocol assignments"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing SIDs"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
];

/// Registry entries inside refused blocks that are globally reachable
/// (anycast services, AS112, AMT, ORCHIDv2, drone DETs): allowed.
const GLOBALLY_REACHABLE: &[&str] = &[
    "192.0.0.9/32",
    "192.0.0.10/32",
    "2001:1::1/128",
    "2001:1::2/128",
    "2001:1::3/128",
    "2001:3::/32",
    "2001:4:112::/48",
    "2001:20::/28",
    "2001:30::/28",
];

fn parse_table(entries: &[&str]) -> Vec<IpNet> {
    entries
        .iter()
        .map(|cidr| cidr.parse().expect("the egress tables are valid CIDR"))
        .collect()
}

static REFUSED_RANGES: LazyLock<Vec<SpecialRange>> = LazyLock::new(|| {
    REFUSED
        .iter()
        .map(|(cidr, name)| SpecialRange {
            range: cidr.parse().expect("the egress tables are valid CIDR"),
            name,
        })
        .collect()
});
static REACHABLE_RANGES: LazyLock<Vec<IpNet>> = LazyLock::new(|| parse_table(GLOBALLY_REACHABLE));

/// The IPv4 address an IPv6 address carries, for the forms that reach it:
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not `::`
/// or `::1`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::/48`).
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0; 6] && u32::from(low(s[6], s[7])) > 1 {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

/// The refused range `ip` is in, if any: for an IPv6 address carrying an
/// IPv4 address, the IPv4 address's range comes first.
pub fn refused_range(ip: IpAddr) -> Option<SpecialRange> {
    if let IpAddr::V6(v6) = ip {
        if let Some(range) = embedded_ipv4(v6).and_then(|v4| refused_range(IpAddr::V4(v4))) {
            return Some(range);
        }
    }
    if REACHABLE_RANGES.iter().any(|net| net.contains(&ip)) {
        return None;
    }
    REFUSED_RANGES
        .iter()
        .find(|special| special.range.contains(&ip))
        .copied()
}

/// What an operator allows one kind to reach beyond the public internet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowance {
    /// `*`: every special-purpose range.
    pub everything: bool,
    pub ranges: Vec<IpNet>,
}

impl Allowance {
    fn covers(&self, ip: IpAddr) -> bool {
        let embedded = match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.everything
            || self
                .ranges
                .iter()
                .any(|net| net.contains(&ip) || embedded.is_some_and(|v4| net.contains(&v4)))
    }

    fn is_empty(&self) -> bool {
        !self.everything && self.ranges.is_empty()
    }
}

/// Which special-purpose ranges each kind may reach. The default allows
/// none: only public addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: BTreeMap<EgressKind, Allowance>,
}

/// A bad `HOLDFAST_EGRESS_ALLOW` (or deprecated switch) value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct EgressConfigError {
    pub variable: &'static str,
    pub message: String,
}

/// Why a request was not sent. The text is what the model, the webhook
/// attempt log or the API caller sees.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefused {
    #[error(
        "egress refused: {}{address} is in {} range {} (to allow it, set {EGRESS_ALLOW_VAR}={kind}={})",
        host.as_ref().map(|h| format!("{h} resolves to ")).unwrap_or_default(),
        range.name, range.range, allow_hint(*address, *range)
    )]
    Address {
        kind: EgressKind,
        /// The host name that resolved to `address`; None for an IP literal.
        host: Option<String>,
        address: IpAddr,
        range: SpecialRange,
    },
    #[error("egress refused: {host} could not be resolved ({message})")]
    Unresolved { host: String, message: String },
    #[error("egress refused: {host} resolves to no address")]
    NoAddress { host: String },
    #[error("egress refused: {url} is not an http(s) URL with a host")]
    BadUrl { url: String },
}

/// The narrowest allowance that lets `address` through: the address itself
/// (its IPv4 part when the range matched that).
fn allow_hint(address: IpAddr, range: SpecialRange) -> IpAddr {
    match address {
        IpAddr::V6(v6) if range.range.addr().is_ipv4() => {
            embedded_ipv4(v6).map(IpAddr::V4).unwrap_or(address)
        }
        _ => address,
    }
}

impl EgressPolicy {
    /// Parses `HOLDFAST_EGRESS_ALLOW`: comma-separated `kind=ranges`
    /// entries, where `kind` is `web_fetch`, `mcp`, `webhook`, `wake`,
    /// `model`, `content_url` or `*` (every kind), and `ranges` is a `;`-separated list of
    /// CIDR ranges, single addresses, or `*` (every special-purpose range).
    /// E.g. `web_fetch=10.0.0.0/8,mcp=10.1.2.0/24;fd00::/8,webhook=*`.
    /// A kind named twice gets the union. Empty means nothing is allowed.
    pub fn parse(spec: &str) -> Result<EgressPolicy, EgressConfigError> {
        let bad = |message: String| EgressConfigError {
            variable: EGRESS_ALLOW_VAR,
            message,
        };
        let mut policy = EgressPolicy::default();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (kind, ranges) = entry.split_once('=').ok_or_else(|| {
                bad(format!(
                    "{entry:?} is not kind=ranges (e.g. web_fetch=10.0.0.0/8)"
                ))
            })?;
            let kinds: Vec<EgressKind> = match kind.trim() {
                "*" => EgressKind::ALL.to_vec(),
                name => vec![EgressKind::ALL
                    .into_iter()
                    .find(|k| k.name() == name)
                    .ok_or_else(|| {
                        bad(format!(
                            "unknown kind {name:?}; kinds are web_fetch, mcp, webhook, wake, model, content_url and *"
                        ))
                    })?],
            };
            let mut allowance = Allowance::default();
            for range in ranges.split(';').map(str::trim) {
                match range {
                    "" => return Err(bad(format!("{entry:?} has an empty range"))),
                    "*" => allowance.everything = true,
                    _ => allowance.ranges.push(parse_range(range).ok_or_else(|| {
                        bad(format!(
                            "{range:?} (in {entry:?}) is not an IP address, a CIDR range or *"
                        ))
                    })?),
                }
            }
            for kind in kinds {
                policy.allow_for(kind, allowance.clone());
            }
        }
        Ok(policy)
    }

    /// The policy of this deployment: `HOLDFAST_EGRESS_ALLOW` (`allow`), plus
    /// the deprecated `HOLDFAST_WEB_FETCH_ALLOW_PRIVATE` and
    /// `HOLDFAST_WEBHOOK_ALLOW_PRIVATE` switches read from `lookup` (`true`
    /// means `web_fetch=*`, `webhook=*`), with a warning when they are used.
    pub fn configure(
        allow: Option<&str>,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<EgressPolicy, EgressConfigError> {
        let mut policy = EgressPolicy::parse(allow.unwrap_or_default())?;
        for (variable, kind) in [
            (DEPRECATED_WEB_FETCH_ALLOW_PRIVATE, EgressKind::WebFetch),
            (DEPRECATED_WEBHOOK_ALLOW_PRIVATE, EgressKind::Webhook),
        ] {
            let Some(value) = lookup(variable).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            let on = match value.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" => false,
                _ => {
                    return Err(EgressConfigError {
                        variable,
                        message: format!("{value:?} is not true or false"),
                    })
                }
            };
            tracing::warn!(
                "{variable} is deprecated; use {EGRESS_ALLOW_VAR}={kind}=* (or narrower ranges)"
            );
            if on {
                policy.allow_for(
                    kind,
                    Allowance {
                        everything: true,
                        ranges: Vec::new(),
                    },
                );
            }
        }
        Ok(policy)
    }

    /// Adds `allowance` to what `kind` may reach.
    pub fn allow_for(&mut self, kind: EgressKind, allowance: Allowance) {
        let current = self.allow.entry(kind).or_default();
        current.everything |= allowance.everything;
        current.ranges.extend(allowance.ranges);
    }

    /// True when the operator allows `kind` some special-purpose range. The
    /// SQL check of webhook URL literals at registration is a yes/no switch
    /// (`p_allow_private`); this is its value.
    pub fn allows_any_special(&self, kind: EgressKind) -> bool {
        self.allow.get(&kind).is_some_and(|a| !a.is_empty())
    }

    /// Whether `kind` may connect to `ip`; `host` is the name it was
    /// resolved from (for the message).
    pub fn check_ip(
        &self,
        kind: EgressKind,
        host: Option<&str>,
        ip: IpAddr,
    ) -> Result<(), EgressRefused> {
        let Some(range) = refused_range(ip) else {
            return Ok(());
        };
        if self.allow.get(&kind).is_some_and(|a| a.covers(ip)) {
            return Ok(());
        }
        Err(EgressRefused::Address {
            kind,
            host: host.map(str::to_owned),
            address: ip,
            range,
        })
    }

    /// Checks a URL before a request (and at each redirect): http or https,
    /// with a host, and an IP-literal host allowed for `kind`. Names are
    /// checked when they are resolved ([`EgressPolicy::resolve`]).
    pub fn check_url(&self, kind: EgressKind, url: &Url) -> Result<(), EgressRefused> {
        let bad = || EgressRefused::BadUrl {
            url: url.to_string(),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad());
        }
        // The URL parser has already normalised IPv4 spellings (`127.1`,
        // `2130706433`, `0x7f.1`) to dotted quads; IPv6 keeps its brackets.
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(bad)?;
        let literal = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
        match literal.unwrap_or(host).parse::<IpAddr>() {
            Ok(ip) => self.check_ip(kind, None, ip),
            Err(_) => Ok(()),
        }
    }

    /// Resolves `host` and checks every address it resolves to: one refused
    /// address refuses the name (a name that also points inside is not one
    /// to trust with the others). The caller connects to what is returned.
    pub async fn resolve(
        &self,
        kind: EgressKind,
        host: &str,
    ) -> Result<Vec<SocketAddr>, EgressRefused> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| EgressRefused::Unresolved {
                host: host.to_owned(),
                message: e.to_string(),
            })?
            .collect();
        if addrs.is_empty() {
            return Err(EgressRefused::NoAddress {
                host: host.to_owned(),
            });
        }
        for addr in &addrs {
            self.check_ip(kind, Some(host), addr.ip())?;
        }
        Ok(addrs)
    }

    /// Checks a URL a tenant configures (an MCP server, an image's URL)
    /// when it is given, so that a refused one is an error then and not a
    /// surprise later: an IP literal as [`EgressPolicy::check_url`] does,
    /// and a name by what it resolves to now (within
    /// [`CONFIGURED_URL_RESOLVE_TIMEOUT`]). A name that does not resolve
    /// (in time, or at all) passes: it may not exist yet, and it is
    /// resolved again at every use.
    pub async fn check_configured_url(
        &self,
        kind: EgressKind,
        url: &Url,
    ) -> Result<(), EgressRefused> {
        self.check_url(kind, url)?;
        let Some(host) = url.domain() else {
            return Ok(());
        };
        match tokio::time::timeout(CONFIGURED_URL_RESOLVE_TIMEOUT, self.resolve(kind, host)).await {
            Ok(Err(refused @ EgressRefused::Address { .. })) => Err(refused),
            _ => Ok(()),
        }
    }

    /// A reqwest client builder for `kind`: the process's TLS configuration
    /// ([`holdfast_outbound::client_builder`]), names resolved through the
    /// policy, and proxy variables ignored. Callers add their timeouts
    /// and a redirect policy that calls [`EgressPolicy::check_url`] (or none).
    pub fn client_builder(self: &Arc<Self>, kind: EgressKind) -> reqwest::ClientBuilder {
        holdfast_outbound::client_builder()
            .no_proxy()
            .dns_resolver(Arc::new(EgressResolver {
                policy: self.clone(),
                kind,
            }))
    }
}

/// How long [`EgressPolicy::check_configured_url`] waits for a name to
/// resolve.
pub const CONFIGURED_URL_RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `X-` headers a tenant may not set on an MCP request: they steer proxies,
/// load balancers and cloud metadata services, not the MCP server.
const DENIED_X_HEADERS: &[&str] = &[
    "x-forwarded-",
    "x-real-ip",
    "x-client-ip",
    "x-cluster-client-ip",
    "x-original-",
    "x-rewrite-url",
    "x-host",
    "x-http-method",
    "x-method-override",
    "x-aws-ec2-metadata-token",
    "x-google-metadata-request",
    "x-envoy-",
    "x-amzn-",
];

/// Whether a tenant may set header `name` on its MCP server requests:
/// `Authorization`, `Api-Key`, and `X-*` headers other than
/// [`DENIED_X_HEADERS`] (prefixes). Everything else is refused: hop-by-hop
/// and framing headers, `Host`, `Cookie`, `Proxy-*`, `Metadata-Flavor`,
/// `Forwarded`, and the headers the MCP transport sets itself. The API
/// refuses the rest at config time (422 naming the header); the worker
/// drops it at send time (for configs written through SQL).
pub fn check_mcp_header(name: &str) -> Result<(), String> {
    let lower = name.to_ascii_lowercase();
    let allowed = match lower.as_str() {
        "authorization" | "api-key" => true,
        _ if lower.starts_with("x-") => !DENIED_X_HEADERS.iter().any(|d| lower.starts_with(d)),
        _ => false,
    };
    match allowed {
        true => Ok(()),
        false => Err(format!(
            "header {name:?} may not be set on MCP requests; allowed are Authorization, \
             Api-Key and X-* headers (not X-Forwarded-*, X-Real-IP and other proxy or \
             metadata headers)"
        )),
    }
}

/// `10.0.0.0/8`, `fd00::/8`, or a single address (`/32`, `/128`).
fn parse_range(text: &str) -> Option<IpNet> {
    if let Ok(net) = IpNet::from_str(text) {
        return Some(net.trunc());
    }
    text.parse::<IpAddr>().ok().map(IpNet::from)
}

/// The reqwest resolver of one kind: [`EgressPolicy::resolve`].
pub struct EgressResolver {
    pub policy: Arc<EgressPolicy>,
    pub kind: EgressKind,
}

impl Resolve for EgressResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (policy, kind, host) = (self.policy.clone(), self.kind, name.as_str().to_owned());
        Box::pin(async move {
            let addrs = policy.resolve(kind, &host).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The [`EgressRefused`] somewhere in an error's causes (reqwest wraps a
/// resolver's error several levels deep).
pub fn refusal_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a EgressRefused> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(refused) = e.downcast_ref::<EgressRefused>() {
            return Some(refused);
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> Option<&'static str> {
        refused_range(ip.parse().unwrap()).map(|r| r.name)
    }

    #[test]
    fn special_purpose_addresses_are_refused_by_range() {
        for (ip, name) in [
            ("0.0.0.0", "\"this network\""),
            ("0.1.2.3", "\"this network\""),
            ("10.0.0.1", "private-use"),
            ("100.64.0.1", "shared address space (CGNAT)"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("172.16.0.1", "private-use"),
            ("172.31.255.255", "private-use"),
            ("192.0.0.8", "IETF protocol assignments"),
            ("192.0.2.1", "documentation (TEST-NET-1)"),
            ("192.88.99.1", "deprecated 6to4 relay anycast"),
            ("192.168.1.1", "private-use"),
            ("198.18.0.1", "benchmarking"),
            ("198.51.100.7", "documentation (TEST-NET-2)"),
            ("203.0.113.7", "documentation (TEST-NET-3)"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "limited broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::127.0.0.1", "loopback"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("64:ff9b::a00:1", "private-use"),
            ("64:ff9b:1::1", "local-use IPv4/IPv6 translation"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a9fe:a9fe::1", "link-local"),
            ("100::1", "discard-only"),
            ("2001::1", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("5f00::1", "segment routing SIDs"),
            ("fd00::1", "unique-local"),
            ("fc00::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("fec0::1", "site-local (deprecated)"),
            ("ff02::1", "multicast"),
        ] {
            assert_eq!(refused(ip), Some(name), "{ip}");
        }
    }

    #[test]
    fn public_and_globally_reachable_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.0.9",
            "192.0.0.10",
            "192.31.196.1",
            "192.175.48.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:1::1",
            "2001:4:112::1",
            "2001:20::1",
        ] {
            assert_eq!(refused(ip), None, "{ip}");
        }
    }

    #[test]
    fn the_allow_setting_opens_ranges_per_kind() {
        let policy = EgressPolicy::parse(
            "web_fetch=10.0.0.0/8, mcp=10.1.2.0/24;fd00::/8,webhook=*,model=127.0.0.1",
        )
        .unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(policy
            .check_ip(EgressKind::WebFetch, None, ip("10.9.9.9"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::WebFetch, None, ip("::ffff:10.9.9.9"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::WebFetch, None, ip("127.0.0.1"))
            .is_err());
        assert!(policy
            .check_ip(EgressKind::Mcp, None, ip("10.1.2.3"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::Mcp, None, ip("10.1.3.3"))
            .is_err());
        assert!(policy
            .check_ip(EgressKind::Mcp, None, ip("fd12::1"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::Webhook, None, ip("169.254.169.254"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::Model, None, ip("127.0.0.1"))
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::Model, None, ip("127.0.0.2"))
            .is_err());
        assert!(policy
            .check_ip(EgressKind::Wake, None, ip("10.0.0.1"))
            .is_err());
        assert!(policy
            .check_ip(EgressKind::Wake, None, ip("8.8.8.8"))
            .is_ok());
        assert!(policy.allows_any_special(EgressKind::Mcp));
        assert!(!policy.allows_any_special(EgressKind::Wake));

        let every = EgressPolicy::parse("*=192.168.0.0/16").unwrap();
        for kind in EgressKind::ALL {
            assert!(
                every.check_ip(kind, None, ip("192.168.3.4")).is_ok(),
                "{kind}"
            );
        }
        assert_eq!(EgressPolicy::parse(" ").unwrap(), EgressPolicy::default());
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        for (spec, expected) in [
            ("web_fetch", "is not kind=ranges"),
            ("ftp=10.0.0.0/8", "unknown kind \"ftp\""),
            ("mcp=10.0.0.0/33", "is not an IP address"),
            ("mcp=", "empty range"),
            ("mcp=10.0.0.0/8;;", "empty range"),
            ("mcp=example.com", "is not an IP address"),
        ] {
            let error = EgressPolicy::parse(spec).unwrap_err();
            assert_eq!(error.variable, EGRESS_ALLOW_VAR);
            assert!(error.message.contains(expected), "{spec}: {error}");
        }
    }

    #[test]
    fn deprecated_switches_map_onto_the_setting() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let policy = EgressPolicy::configure(
            Some("mcp=10.0.0.0/8"),
            env(&[
                (DEPRECATED_WEB_FETCH_ALLOW_PRIVATE, "true"),
                (DEPRECATED_WEBHOOK_ALLOW_PRIVATE, "false"),
            ]),
        )
        .unwrap();
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(policy
            .check_ip(EgressKind::WebFetch, None, loopback)
            .is_ok());
        assert!(policy
            .check_ip(EgressKind::Webhook, None, loopback)
            .is_err());
        assert!(policy.allows_any_special(EgressKind::Mcp));
        let error =
            EgressPolicy::configure(None, env(&[(DEPRECATED_WEBHOOK_ALLOW_PRIVATE, "maybe")]))
                .unwrap_err();
        assert_eq!(error.variable, DEPRECATED_WEBHOOK_ALLOW_PRIVATE);
    }

    #[test]
    fn refusals_name_the_address_the_range_and_the_setting() {
        let policy = EgressPolicy::default();
        let url = |s: &str| Url::parse(s).unwrap();
        let message = |s: &str| {
            policy
                .check_url(EgressKind::WebFetch, &url(s))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            message("http://10.0.0.1/"),
            "egress refused: 10.0.0.1 is in private-use range 10.0.0.0/8 \
             (to allow it, set HOLDFAST_EGRESS_ALLOW=web_fetch=10.0.0.1)"
        );
        assert_eq!(
            message("http://[::ffff:127.0.0.1]:8080/"),
            "egress refused: ::ffff:127.0.0.1 is in loopback range 127.0.0.0/8 \
             (to allow it, set HOLDFAST_EGRESS_ALLOW=web_fetch=127.0.0.1)"
        );
        for spelling in ["http://127.1/", "http://2130706433/", "http://0x7f.0.0.1/"] {
            assert!(
                message(spelling).contains("loopback range 127.0.0.0/8"),
                "{spelling}"
            );
        }
        assert!(matches!(
            policy.check_url(EgressKind::WebFetch, &url("file:///etc/passwd")),
            Err(EgressRefused::BadUrl { .. })
        ));
        assert!(policy
            .check_url(EgressKind::WebFetch, &url("https://example.com/"))
            .is_ok());
    }

    #[test]
    fn tenant_mcp_headers_are_limited_to_a_safe_set() {
        for ok in [
            "Authorization",
            "authorization",
            "X-Api-Key",
            "Api-Key",
            "X-Tenant",
        ] {
            assert!(check_mcp_header(ok).is_ok(), "{ok}");
        }
        for refused in [
            "Host",
            "Cookie",
            "Metadata-Flavor",
            "Connection",
            "Transfer-Encoding",
            "Proxy-Authorization",
            "Forwarded",
            "X-Forwarded-For",
            "x-forwarded-host",
            "X-Real-IP",
            "X-aws-ec2-metadata-token",
            "Mcp-Session-Id",
            "Accept",
        ] {
            assert!(check_mcp_header(refused).is_err(), "{refused}");
        }
    }

    #[tokio::test]
    async fn names_are_refused_by_what_they_resolve_to() {
        let error = EgressPolicy::default()
            .resolve(EgressKind::Webhook, "localhost")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("egress refused: localhost resolves to "),
            "{error}"
        );
        assert!(error.contains("loopback range"), "{error}");
        let allowed = EgressPolicy::parse("webhook=127.0.0.0/8;::1").unwrap();
        let addrs = allowed
            .resolve(EgressKind::Webhook, "localhost")
            .await
            .unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
