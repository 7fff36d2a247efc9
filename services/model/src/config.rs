//! [`ClientConfig`]: where and how to reach a model API, for either client.

use std::time::Duration;

use secrecy::SecretString;

use crate::http::RetryPolicy;

/// Where and how to reach a model API: [`AnthropicClient`](crate::AnthropicClient)
/// and [`OpenAiClient`](crate::OpenAiClient) take the same configuration; start
/// from [`ClientConfig::anthropic`] or [`ClientConfig::openai`] for the
/// provider's default base URL.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Anthropic: `ANTHROPIC_BASE_URL`, default `https://api.anthropic.com` (no
    /// `/v1`). OpenAI-compatible: `OPENAI_BASE_URL`, default
    /// `https://api.openai.com/v1`; as in the OpenAI SDKs it includes the version
    /// path: `http://localhost:8000/v1` for vLLM, `http://localhost:11434/v1` for
    /// Ollama.
    pub base_url: String,
    /// `ANTHROPIC_API_KEY`, sent as `x-api-key`, or `OPENAI_API_KEY`, sent as
    /// `Authorization: Bearer`; none for a keyless proxy or a local server.
    pub api_key: Option<SecretString>,
    /// Timeout of one attempt, default 120 s.
    pub timeout: Duration,
    /// Attempts in all, default 4.
    pub max_attempts: u32,
    /// First retry backoff before jitter, default 500 ms.
    pub retry_base_delay: Duration,
    /// Longest wait between attempts, `retry-after` included, default 30 s.
    pub retry_max_delay: Duration,
}

/// One provider's default base URL and environment variables.
struct Defaults {
    base_url: &'static str,
    key_var: &'static str,
    base_var: &'static str,
}

const ANTHROPIC: Defaults = Defaults {
    base_url: "https://api.anthropic.com",
    key_var: "ANTHROPIC_API_KEY",
    base_var: "ANTHROPIC_BASE_URL",
};

const OPENAI: Defaults = Defaults {
    base_url: "https://api.openai.com/v1",
    key_var: "OPENAI_API_KEY",
    base_var: "OPENAI_BASE_URL",
};

impl ClientConfig {
    /// The Anthropic API at `https://api.anthropic.com`, no key.
    pub fn anthropic() -> ClientConfig {
        ClientConfig::new(ANTHROPIC.base_url)
    }

    /// OpenAI at `https://api.openai.com/v1`, no key.
    pub fn openai() -> ClientConfig {
        ClientConfig::new(OPENAI.base_url)
    }

    /// From `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL` as `lookup` reads them
    /// (the environment, at start-up); `None` when neither is set.
    pub fn anthropic_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<ClientConfig> {
        ClientConfig::from_lookup(&ANTHROPIC, lookup)
    }

    /// From `OPENAI_API_KEY` and `OPENAI_BASE_URL` as `lookup` reads them;
    /// `None` when neither is set.
    pub fn openai_from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Option<ClientConfig> {
        ClientConfig::from_lookup(&OPENAI, lookup)
    }

    fn new(base_url: &str) -> ClientConfig {
        ClientConfig {
            base_url: base_url.to_owned(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_attempts: 4,
            retry_base_delay: Duration::from_millis(500),
            retry_max_delay: Duration::from_secs(30),
        }
    }

    /// Empty or blank values count as unset.
    fn from_lookup(
        defaults: &Defaults,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Option<ClientConfig> {
        let non_empty = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let key = non_empty(defaults.key_var);
        let base = non_empty(defaults.base_var);
        if key.is_none() && base.is_none() {
            return None;
        }
        let mut config = ClientConfig::new(defaults.base_url);
        if let Some(base) = base {
            config.base_url = base;
        }
        config.api_key = key.map(SecretString::from);
        Some(config)
    }

    /// `path` (with its leading `/`) below the base URL, whether or not that
    /// ends in `/`.
    pub(crate) fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.base_url.trim_end_matches('/'))
    }

    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            min_delay: self.retry_base_delay,
            max_delay: self.retry_max_delay,
        }
    }

    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    pub fn with_api_key(mut self, api_key: SecretString) -> Self {
        self.api_key = Some(api_key);
        self
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Attempts in all (1 disables retries).
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    pub fn with_retry_base_delay(mut self, delay: Duration) -> Self {
        self.retry_base_delay = delay;
        self
    }

    pub fn with_retry_max_delay(mut self, delay: Duration) -> Self {
        self.retry_max_delay = delay;
        self
    }
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::*;

    fn key(c: &ClientConfig) -> Option<String> {
        c.api_key.as_ref().map(|k| k.expose_secret().to_owned())
    }

    #[test]
    fn defaults() {
        for (c, base) in [
            (ClientConfig::anthropic(), "https://api.anthropic.com"),
            (ClientConfig::openai(), "https://api.openai.com/v1"),
        ] {
            assert_eq!(c.base_url, base);
            assert!(c.api_key.is_none());
            assert_eq!(c.timeout, Duration::from_secs(120));
            assert_eq!(c.max_attempts, 4);
            assert_eq!(c.retry_base_delay, Duration::from_millis(500));
            assert_eq!(c.retry_max_delay, Duration::from_secs(30));
        }
        assert_eq!(ClientConfig::openai().with_max_attempts(0).max_attempts, 1);
        let c = ClientConfig::openai().with_base_url("http://localhost:8000/v1/");
        assert_eq!(
            c.endpoint("/chat/completions"),
            "http://localhost:8000/v1/chat/completions"
        );
        assert_eq!(
            ClientConfig::anthropic().endpoint("/v1/messages"),
            "https://api.anthropic.com/v1/messages"
        );
    }

    #[test]
    fn anthropic_env_config_needs_a_key_or_a_base() {
        assert!(ClientConfig::anthropic_from_lookup(|_| None).is_none());
        assert!(ClientConfig::anthropic_from_lookup(|_| Some(" ".into())).is_none());
        let c = ClientConfig::anthropic_from_lookup(|n| {
            (n == "ANTHROPIC_API_KEY").then(|| "sk-1".into())
        })
        .unwrap();
        assert_eq!(c.base_url, "https://api.anthropic.com");
        assert_eq!(key(&c).as_deref(), Some("sk-1"));
        let c = ClientConfig::anthropic_from_lookup(|n| {
            (n == "ANTHROPIC_BASE_URL").then(|| "http://proxy:1".into())
        })
        .unwrap();
        assert_eq!(c.base_url, "http://proxy:1");
        assert!(c.api_key.is_none());
        // The other provider's variables are not read.
        assert!(
            ClientConfig::anthropic_from_lookup(|n| n.starts_with("OPENAI_").then(|| "x".into()))
                .is_none()
        );
    }

    #[test]
    fn openai_env_config_needs_a_key_or_a_base() {
        assert!(ClientConfig::openai_from_lookup(|_| None).is_none());
        assert!(ClientConfig::openai_from_lookup(|_| Some(" ".into())).is_none());
        let c = ClientConfig::openai_from_lookup(|n| {
            (n == "OPENAI_BASE_URL").then(|| "http://localhost:11434/v1".into())
        })
        .unwrap();
        assert_eq!(c.base_url, "http://localhost:11434/v1");
        assert!(c.api_key.is_none());
        let c =
            ClientConfig::openai_from_lookup(|n| (n == "OPENAI_API_KEY").then(|| "sk-2".into()))
                .unwrap();
        assert_eq!(c.base_url, "https://api.openai.com/v1");
        assert_eq!(key(&c).as_deref(), Some("sk-2"));
        assert!(
            ClientConfig::openai_from_lookup(|n| n.starts_with("ANTHROPIC_").then(|| "x".into()))
                .is_none()
        );
    }
}
