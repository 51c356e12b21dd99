//! Where a sync may connect (SPEC.md §8.4): a source URI is chosen by
//! whoever starts the job, so without a check it could make the registry
//! read its cloud's metadata service (and the credentials it hands out) or
//! services listening only on the registry host.
//!
//! The check runs where the address is known, at connect time: a resolver
//! ([`Guard`]) that every HTTP client of a source uses, for `reqwest` and
//! for `object_store`, so a name that resolves to an allowed address when
//! the job is created and to a refused one when it connects (DNS
//! rebinding) is still refused. URLs that name an IP literal never reach a
//! resolver and are checked by [`NetPolicy::check_url`] before use.
//!
//! Not the place that decides which secret a source may have, nor whether
//! an `?endpoint=` override is allowed: that is [`crate::scope`] and the
//! registry's secret binding.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use crate::{ErrorKind, SyncError};

/// The addresses a sync may reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetPolicy {
    /// Loopback addresses (127.0.0.0/8, ::1, 0.0.0.0) may be reached: true
    /// only on a registry that itself listens on loopback alone and has no
    /// public URL (a proxy would make the host's loopback services
    /// reachable through it), where only the host's own users reach it.
    pub loopback: bool,
    /// Hosts of the admin's `sync_endpoints`, lowercase: any address they
    /// resolve to may be reached, and `?endpoint=` may name them.
    pub endpoints: BTreeSet<String>,
    /// The admin's `sync_endpoints`, as [`endpoint_origin`] writes them.
    pub origins: BTreeSet<String>,
}

/// Why an address was refused; found again in an error's causes by
/// [`refused_in`], so a refusal fails the job at once instead of being
/// retried like a dropped connection.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl NetPolicy {
    /// The policy for a registry: `loopback` when it listens on loopback
    /// alone; `sync_endpoints` as configured (each an http(s) URL).
    pub fn new<'a>(
        loopback: bool,
        sync_endpoints: impl IntoIterator<Item = &'a str>,
    ) -> Result<NetPolicy, String> {
        let mut p = NetPolicy {
            loopback,
            ..NetPolicy::default()
        };
        for e in sync_endpoints {
            let url = url::Url::parse(e)
                .map_err(|err| format!("sync_endpoints: {e:?} is not a URL: {err}"))?;
            let origin = endpoint_origin(e).ok_or_else(|| {
                format!("sync_endpoints: {e:?} is not an http:// or https:// URL")
            })?;
            p.endpoints
                .insert(url.host_str().unwrap_or_default().to_ascii_lowercase());
            p.origins.insert(origin);
        }
        Ok(p)
    }

    /// A policy that refuses nothing but link-local and metadata
    /// addresses: for tools and tests on one machine.
    pub fn local() -> NetPolicy {
        NetPolicy {
            loopback: true,
            ..NetPolicy::default()
        }
    }

    /// Whether `origin` ([`endpoint_origin`]) is on the admin's list.
    pub fn endpoint_listed(&self, origin: &str) -> bool {
        self.origins.contains(origin)
    }

    /// Why `host` may not be reached at `ip`, if it may not.
    pub fn refusal(&self, host: &str, ip: IpAddr) -> Option<String> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if self.endpoints.contains(&host.to_ascii_lowercase()) {
            return None;
        }
        let ip = canonical(ip);
        let at = if host.parse::<IpAddr>().is_ok() {
            format!("{host} is")
        } else {
            format!("{host} is at {ip},")
        };
        if is_link_local_or_metadata(ip) {
            return Some(format!(
                "{at} a link-local or cloud metadata address; a sync never connects there"
            ));
        }
        if ip.is_multicast() {
            return Some(format!("{at} a multicast address"));
        }
        if !self.loopback && (ip.is_loopback() || ip.is_unspecified()) {
            return Some(format!(
                "{at} this host's loopback; a registry reachable from other hosts connects there only for an endpoint listed in registry.toml sync_endpoints"
            ));
        }
        None
    }

    /// Refuses a URL whose host is an IP literal this policy refuses
    /// (names are checked by [`Guard`] when they are resolved).
    pub fn check_url(&self, uri: &str, url: &str) -> Result<(), SyncError> {
        let Ok(parsed) = url::Url::parse(url) else {
            return Ok(());
        };
        let ip = match parsed.host() {
            Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
            Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
            _ => return Ok(()),
        };
        match self.refusal(parsed.host_str().unwrap_or_default(), ip) {
            Some(why) => Err(refused(uri, &why)),
            None => Ok(()),
        }
    }

    /// Resolves `host` (a name or IP literal, with or without `:port`) now
    /// and refuses it as [`Guard`] would. For clients that take no
    /// resolver: a name can still change between this check and their
    /// connection, so use it only where [`Guard`] cannot be.
    pub async fn check_host(&self, uri: &str, host: &str) -> Result<(), SyncError> {
        let url = format!("http://{host}/");
        let Ok(parsed) = url::Url::parse(&url) else {
            return Err(refused(uri, &format!("{host:?} is not a host name")));
        };
        if !matches!(parsed.host(), Some(url::Host::Domain(_))) {
            return self.check_url(uri, &url);
        }
        let name = parsed.host_str().unwrap_or_default().to_string();
        match Guard::resolve_checked(Arc::new(self.clone()), name).await {
            Ok(_) => Ok(()),
            Err(e) => match refused_in(e.as_ref()) {
                Some(why) => Err(refused(uri, &why)),
                // Not resolvable now: the request itself will say so.
                None => Ok(()),
            },
        }
    }

    /// The resolver that enforces this policy.
    pub fn guard(&self) -> Guard {
        Guard(Arc::new(self.clone()))
    }
}

/// The job error for a refused address.
pub(crate) fn refused(uri: &str, why: &str) -> SyncError {
    SyncError::new(ErrorKind::InvalidSource, format!("{uri}: {why}"))
}

/// The refusal among an error's causes, if one is.
pub(crate) fn refused_in(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<Refused>() {
            return Some(r.0.clone());
        }
        cause = c.source();
    }
    None
}

/// `scheme://host[:port]` of an http(s) URL, lowercase, default port left
/// out: how endpoints are compared.
pub fn endpoint_origin(url: &str) -> Option<String> {
    let u = url::Url::parse(url.trim()).ok()?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return None;
    }
    Some(u.origin().ascii_serialization())
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`) is that IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// 169.254.0.0/16 (where AWS, GCP and Azure serve instance metadata and
/// credentials), fe80::/10, and AWS's IPv6 metadata address.
fn is_link_local_or_metadata(ip: IpAddr) -> bool {
    const AWS_IMDS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    match ip {
        IpAddr::V4(v4) => v4.is_link_local() || v4 == Ipv4Addr::new(100, 100, 100, 200),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == AWS_IMDS_V6,
    }
}

/// Resolves names with the system resolver and refuses the whole name
/// when any of its addresses is refused: a connection could go to any of
/// them.
#[derive(Clone, Debug)]
pub struct Guard(Arc<NetPolicy>);

impl Guard {
    async fn resolve_checked(
        policy: Arc<NetPolicy>,
        host: String,
    ) -> Result<Vec<IpAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let addrs: Vec<IpAddr> = tokio::net::lookup_host((host.as_str(), 0))
            .await?
            .map(|a| a.ip())
            .collect();
        for ip in &addrs {
            if let Some(why) = policy.refusal(&host, *ip) {
                return Err(Box::new(Refused(why)));
            }
        }
        Ok(addrs)
    }
}

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (policy, host) = (Arc::clone(&self.0), name.as_str().to_string());
        Box::pin(async move {
            let ips = Guard::resolve_checked(policy, host).await?;
            // Port 0 is replaced by the URL's port.
            let addrs: reqwest::dns::Addrs =
                Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

impl object_store::client::DnsResolver for Guard {
    fn resolve(&self, host: &str) -> object_store::client::DnsFuture {
        Box::pin(Guard::resolve_checked(
            Arc::clone(&self.0),
            host.to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_and_link_local_are_always_refused() {
        for p in [NetPolicy::local(), NetPolicy::default()] {
            for a in [
                "169.254.169.254",
                "169.254.170.2",
                "fe80::1",
                "fd00:ec2::254",
                "::ffff:169.254.169.254",
                "100.100.100.200",
            ] {
                assert!(p.refusal("h", ip(a)).is_some(), "{a}");
            }
            assert!(p.refusal("h", ip("93.184.216.34")).is_none());
            assert!(p.refusal("h", ip("10.0.0.5")).is_none());
        }
    }

    #[test]
    fn loopback_only_on_a_loopback_registry_or_when_listed() {
        let open = NetPolicy::new(false, ["http://127.0.0.1:9000/"]).unwrap();
        for a in [
            "127.0.0.1",
            "127.9.9.9",
            "::1",
            "0.0.0.0",
            "::ffff:127.0.0.1",
        ] {
            assert!(NetPolicy::local().refusal("h", ip(a)).is_none(), "{a}");
            assert!(open.refusal("h", ip(a)).is_some(), "{a}");
        }
        assert!(open.refusal("127.0.0.1", ip("127.0.0.1")).is_none());
        assert!(open.endpoint_listed("http://127.0.0.1:9000"));
        assert!(!open.endpoint_listed("http://127.0.0.1:9001"));
    }

    #[test]
    fn literal_urls_are_checked_before_use() {
        let p = NetPolicy::default();
        assert!(p
            .check_url("s3://b", "http://169.254.169.254/latest")
            .is_err());
        assert!(p.check_url("s3://b", "http://[::1]:9000").is_err());
        assert!(p.check_url("s3://b", "https://s3.amazonaws.com").is_ok());
        assert!(NetPolicy::local()
            .check_url("s3://b", "http://[::1]:9000")
            .is_ok());
    }

    #[test]
    fn origins_compare_without_case_slash_or_default_port() {
        assert_eq!(
            endpoint_origin("HTTP://Minio.local:80/").as_deref(),
            Some("http://minio.local")
        );
        assert_eq!(
            endpoint_origin("https://h:9000/x").as_deref(),
            Some("https://h:9000")
        );
        assert_eq!(endpoint_origin("ftp://h"), None);
    }

    #[tokio::test]
    async fn names_are_checked_when_resolved() {
        use reqwest::dns::Resolve;
        let g = NetPolicy::default().guard();
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        let e = match g.resolve(name).await {
            Ok(_) => panic!("localhost resolved on a non-loopback policy"),
            Err(e) => e,
        };
        assert!(refused_in(e.as_ref()).is_some(), "{e}");
        let local = NetPolicy::local().guard();
        assert!(local.resolve("localhost".parse().unwrap()).await.is_ok());
    }
}
