use super::*;

// ---------------------------------------------------------------------------------
// exfil-url, unlisted-url

pub(super) static URL: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?i)\b(?:https?|wss?)://[^\s<>`\x22'\\]+"));
/// A bare host name, or an e-mail address, with an optional port and path.
pub(super) static BARE_HOST: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:[a-z0-9][\w.+-]*@)?(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}\b(?::\d{1,5})?(?:/[^\s<>`\x22'\\]*)?",
    )
});
/// The text before a URL or host that makes it a destination: "send … to",
/// "upload them to the following endpoint:", "POST", "bcc".
pub(super) static SENDING: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)(?:\b(?:send|sends|sending|sent|post|posts|posting|posted|upload|uploads|uploading|uploaded|forward|forwards|forwarding|forwarded|transmit|transmits|transmitting|exfiltrate|exfiltrating|relay|relays|mirror|mirrors|beacon|deliver|delivers|leak|bcc|cc|copy|copies|email|emails|e-mail|mail|share|shares)\b{WINDOW}{{0,120}}?\b(?:to|into)\s*:?\s*(?:(?:the|this|our|a|an|that)\s+)?(?:[\w-]+\s+){{0,2}}?(?:(?:url|uri|endpoint|webhook|server|address|host|api|collector|service|location|inbox|mailbox|domain)\s*:?\s*)?(?:at\s+)?|(?-i:\b(?:POST|PUT)\b)\s*:?\s*(?:to\s+)?|\b(?:send|upload|forward|bcc|exfiltrate)\b\s*:?\s*)$"
    ))
});
/// Words that make sending to a fixed e-mail address a hidden copy rather than an
/// example recipient.
pub(super) static COPY_TO: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:bcc|cc|cop(?:y|ies)|forward\w*|also|every|all|each|always|silently|secretly)\b",
    )
});
/// Name endings that are file extensions, not top-level domains ("report.csv").
pub(super) const FILE_EXTENSIONS: &[&str] = &[
    "csv", "json", "txt", "pdf", "md", "png", "jpg", "jpeg", "gif", "svg", "webp", "html", "htm",
    "xml", "yaml", "yml", "toml", "ini", "cfg", "conf", "log", "zip", "gz", "tgz", "tar", "bz2",
    "xz", "rar", "py", "rs", "js", "ts", "tsx", "jsx", "mjs", "cjs", "go", "java", "kt", "rb",
    "php", "sh", "bash", "ps1", "bat", "exe", "dll", "so", "dylib", "bin", "dat", "db", "sqlite",
    "sql", "doc", "docx", "xls", "xlsx", "ppt", "pptx", "odt", "rtf", "mp3", "mp4", "wav", "mov",
    "avi", "mkv", "env", "lock", "bak", "tmp", "pem", "key", "crt", "cer", "ipynb", "parquet",
    "proto", "wasm", "cpp", "hpp", "cs", "swift", "vue", "css", "scss", "map",
];

pub(super) fn host_allowed(host: &str, allow: &[String]) -> bool {
    let host = host.as_bytes();
    allow.iter().any(|a| {
        let a = a
            .trim()
            .trim_start_matches("*.")
            .trim_start_matches('.')
            .trim_end_matches('.')
            .as_bytes();
        let Some(dot) = host.len().checked_sub(a.len() + 1) else {
            return !a.is_empty() && host.eq_ignore_ascii_case(a);
        };
        !a.is_empty()
            && (host.eq_ignore_ascii_case(a)
                || (host[dot] == b'.' && host[dot + 1..].eq_ignore_ascii_case(a)))
    })
}

/// The host of `scheme://[user@]host[:port]/…`, lower case.
pub(super) fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Trailing punctuation that belongs to the sentence, not the URL.
pub(super) fn trim_url(s: &str) -> &str {
    s.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', ']', '}', '*', '_', '>'])
}

/// Cloud metadata endpoints: nothing a tool description should send the model to.
const METADATA_HOSTS: &[&str] = &[
    "169.254.169.254",
    "metadata.google.internal",
    "metadata",
    "100.100.100.200",
    "fd00:ec2::254",
];

/// A host name built from data: `<base32 of the key>.dns.example`.
pub(super) static HOST_TEMPLATE: LazyLock<Regex> =
    LazyLock::new(|| compile(r"(?i)[<{][^<>{}\n]{1,60}[>}]\.(?:[a-z0-9-]+\.)+[a-z]{2,24}\b"));

/// A placeholder anywhere in a URL (`{conversation}`, `%CHAT_HISTORY%`,
/// `${system_prompt}`, `{{memory}}`, `<api_key>`) named for what the model
/// holds: the conversation, its instructions, memory, secrets, files. A path
/// template of an API (`/repos/{owner}/{repo}`) names none of these.
static CONTEXT_PLACEHOLDER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:[{%<]|\$\{?)\{?[a-z_ ]{0,20}(?:conversation|chat|history|transcript|context|prompt|instructions?|memory|messages?|secret|token|api_?key|password|credential|env|ssh|session)[a-z_ ]{0,20}\}?[}%>]",
    )
});

pub(super) fn urls(text: &str, ctx: &ScanContext, hits: &mut Vec<Hit>) {
    for m in HOST_TEMPLATE.find_iter(text) {
        hits.push(Hit::new(
            EXFIL,
            Severity::High,
            m.range(),
            "a host name the model is to build from data: it carries data out by DNS",
        ));
    }
    let mut url_spans = Vec::new();
    for m in URL.find_iter(text) {
        let url = trim_url(m.as_str());
        let span = m.start()..m.start() + url.len();
        url_spans.push(span.clone());
        let host = url_host(url);
        if METADATA_HOSTS.contains(&host.as_str()) {
            hits.push(Hit::new(
                VISIT_URL,
                Severity::High,
                span,
                format!("points the model at the cloud metadata address {host}"),
            ));
            continue;
        }
        if host.is_empty() || host_allowed(&host, ctx.allow_hosts) {
            continue;
        }
        // `…?d=` with the value left to the model, `…?q={query}`: a URL built to
        // carry data.
        let raw = m.as_str();
        let template = raw.ends_with('=')
            || text[m.end()..].starts_with(['<', '{'])
            || raw.contains("={")
            || raw.contains("=$")
            || raw.contains("=%")
            || CONTEXT_PLACEHOLDER.is_match(raw);
        if template {
            hits.push(Hit::new(
                EXFIL,
                Severity::High,
                span,
                format!("a URL to {host} whose value the model is to fill in: it carries data out"),
            ));
        } else if SENDING.is_match(before(text, m.start(), 200)) {
            hits.push(Hit::new(
                EXFIL,
                Severity::High,
                span,
                format!("sends data to {host}, which is not allowed"),
            ));
        } else {
            hits.push(Hit::new(
                UNLISTED_URL,
                Severity::Low,
                span,
                format!("link to {host}, which is not allowed"),
            ));
        }
    }
    for m in BARE_HOST.find_iter(text) {
        let full = trim_url(m.as_str());
        let span = m.start()..m.start() + full.len();
        if url_spans
            .iter()
            .any(|u| u.start < span.end && span.start < u.end)
        {
            continue;
        }
        let glued = text[..span.start].chars().next_back().is_some_and(|c| {
            c.is_alphanumeric() || matches!(c, '_' | '.' | '/' | '\\' | '-' | '@' | ':')
        });
        let host_part = full.rsplit_once('@').map_or(full, |(_, h)| h);
        let host = host_part
            .split([':', '/'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        let tld = host.rsplit('.').next().unwrap_or("");
        let lead = before(text, span.start, 200);
        if glued
            || FILE_EXTENSIONS.contains(&tld)
            || host_allowed(&host, ctx.allow_hosts)
            || !SENDING.is_match(lead)
        {
            continue;
        }
        // "Sends the invite to alice@example.org" may be an example; "bcc every
        // message to …" is not.
        let severity = if full.contains('@') && !COPY_TO.is_match(lead) {
            Severity::Medium
        } else {
            Severity::High
        };
        hits.push(Hit::new(
            EXFIL,
            severity,
            span,
            format!("sends data to {host}, which is not allowed"),
        ));
    }
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![&*URL, &*BARE_HOST, &*SENDING, &*COPY_TO]
}
