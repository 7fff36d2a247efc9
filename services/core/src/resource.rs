//! [`ResourceUri`]: the canonical URI of a protected resource (RFC 8707 §2, MCP
//! `basic/authorization` "Canonical Server URI").
//!
//! A token is minted for one resource and carries it in `aud`; a server accepts
//! only tokens whose audience names it, and a client asks for a token with
//! `resource=` set to the server it is about to call. Both sides compare the same
//! string, so it is parsed into one form here: absolute, `https` (or `http` on a
//! loopback host), no fragment, no query, scheme and host lower case, no trailing
//! slash (`https://mcp.example.com/mcp`, `https://mcp.example.com`).

use std::fmt;

use url::{Host, Url};

/// A canonical resource URI. Built only by [`ResourceUri::parse`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResourceUri(String);

impl ResourceUri {
    /// Parses and canonicalizes `raw`; the error says what is wrong with it.
    pub fn parse(raw: &str) -> Result<ResourceUri, String> {
        let url = Url::parse(raw.trim()).map_err(|e| format!("{raw:?} is not a URI: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if is_loopback(&url) => {}
            "http" => {
                return Err(format!(
                    "{raw:?}: a resource URI must use https (http only on a loopback host)"
                ));
            }
            other => return Err(format!("{raw:?}: scheme {other:?} is not https")),
        }
        if url.host().is_none() {
            return Err(format!("{raw:?} has no host"));
        }
        if url.fragment().is_some() {
            return Err(format!(
                "{raw:?}: a resource URI must not have a fragment (RFC 8707)"
            ));
        }
        if url.query().is_some() {
            return Err(format!("{raw:?}: a resource URI must not have a query"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "{raw:?}: a resource URI must not carry credentials"
            ));
        }
        // `Url` lower-cases the scheme and host and drops a default port.
        let s = url.as_str().trim_end_matches('/').to_owned();
        Ok(ResourceUri(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `scheme://host[:port]`, without a path.
    pub fn origin(&self) -> String {
        match Url::parse(&self.0) {
            Ok(u) => u.origin().ascii_serialization(),
            Err(_) => self.0.clone(),
        }
    }

    /// The path (empty for a bare origin, else starting with `/`).
    pub fn path(&self) -> &str {
        let after_scheme = self.0.find("://").map_or(0, |i| i + 3);
        self.0[after_scheme..]
            .find('/')
            .map_or("", |i| &self.0[after_scheme + i..])
    }

    /// Where RFC 9728 §3.1 puts this resource's metadata: the well-known suffix
    /// inserted between the host and the path.
    pub fn metadata_url(&self) -> String {
        format!(
            "{}/.well-known/oauth-protected-resource{}",
            self.origin(),
            self.path()
        )
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

impl fmt::Display for ResourceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let r = ResourceUri::parse("HTTPS://MCP.Example.com:443/mcp/").unwrap();
        assert_eq!(r.as_str(), "https://mcp.example.com/mcp");
        assert_eq!(r.origin(), "https://mcp.example.com");
        assert_eq!(r.path(), "/mcp");
        assert_eq!(
            r.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        let bare = ResourceUri::parse("https://mcp.example.com/").unwrap();
        assert_eq!(bare.as_str(), "https://mcp.example.com");
        assert_eq!(bare.path(), "");
        assert_eq!(
            bare.metadata_url(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        let local = ResourceUri::parse("http://127.0.0.1:8080/mcp").unwrap();
        assert_eq!(local.origin(), "http://127.0.0.1:8080");
    }

    #[test]
    fn refused_forms_say_why() {
        for (raw, why) in [
            ("http://mcp.example.com/mcp", "https"),
            ("https://mcp.example.com/mcp#frag", "fragment"),
            ("https://mcp.example.com/mcp?x=1", "query"),
            ("https://user:pw@mcp.example.com", "credentials"),
            ("ftp://mcp.example.com", "scheme"),
            ("mcp.example.com", "not a URI"),
        ] {
            let e = ResourceUri::parse(raw).unwrap_err();
            assert!(e.contains(why), "{raw}: {e}");
        }
    }
}
