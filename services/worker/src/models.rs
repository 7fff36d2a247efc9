//! The models a worker can put to work, and which one a job gets.
//!
//! A job names its model in `research.model`, or takes the deployment's
//! `TRAWL_MODEL`. The name may carry its provider (`anthropic:claude-sonnet-4-5`,
//! `openai:qwen2.5-72b`); a bare name goes to Anthropic when it starts with
//! `claude` and Anthropic is configured, else to the OpenAI-compatible server
//! when one is, else to whichever provider is configured.

use std::sync::Arc;

use trawl_core::workers::{ModelProviders, NO_PROVIDER, Provider};
use trawl_model::{
    AnthropicClient, ClientConfig, ModelClient, ModelPrice, OpenAiClient, PriceList,
};

/// The configured providers, the default model and the price list.
#[derive(Clone, Default)]
pub struct Models {
    anthropic: Option<Arc<dyn ModelClient>>,
    openai: Option<Arc<dyn ModelClient>>,
    default_model: Option<String>,
    prices: PriceList,
}

/// The model a job runs on.
#[derive(Clone)]
pub struct Resolved {
    pub client: Arc<dyn ModelClient>,
    /// The name sent to the provider (without a `provider:` prefix).
    pub model: String,
    /// `None`: the price list does not know it, so its turns cost nothing in the
    /// ledger (self-hosted models).
    pub price: Option<ModelPrice>,
    /// The model's name in metrics: the price list's name for it, the
    /// deployment's default model, or `other`, so a job's `research.model`
    /// (the caller's text) never makes a label of its own.
    pub label: String,
}

/// The metric label of a model neither priced nor the deployment's default.
pub const OTHER_MODEL: &str = "other";

impl Models {
    pub fn new(prices: PriceList) -> Models {
        Models {
            prices,
            ..Models::default()
        }
    }

    pub fn with_anthropic(mut self, client: Arc<dyn ModelClient>) -> Self {
        self.anthropic = Some(client);
        self
    }

    pub fn with_openai(mut self, client: Arc<dyn ModelClient>) -> Self {
        self.openai = Some(client);
        self
    }

    pub fn with_default_model(mut self, model: Option<String>) -> Self {
        self.default_model = model.filter(|m| !m.trim().is_empty());
        self
    }

    /// From settings read by `lookup` (the environment, at start-up):
    /// `ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL`, `OPENAI_API_KEY` /
    /// `OPENAI_BASE_URL`, `TRAWL_MODEL`, and `TRAWL_MODEL_PRICES` (a YAML or JSON
    /// file of prices per million tokens, added to the built-in list of Claude
    /// prices).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Models, String> {
        let mut prices = PriceList::default();
        if let Some(path) = lookup("TRAWL_MODEL_PRICES") {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("TRAWL_MODEL_PRICES {path}: {e}"))?;
            prices.extend(
                PriceList::parse(&text).map_err(|e| format!("TRAWL_MODEL_PRICES {path}: {e}"))?,
            );
        }
        let mut models = Models::new(prices).with_default_model(lookup("TRAWL_MODEL"));
        if let Some(cfg) = ClientConfig::anthropic_from_lookup(&lookup) {
            let client = AnthropicClient::new(cfg).map_err(|e| e.to_string())?;
            models = models.with_anthropic(Arc::new(client));
        }
        if let Some(cfg) = ClientConfig::openai_from_lookup(&lookup) {
            let client = OpenAiClient::new(cfg).map_err(|e| e.to_string())?;
            models = models.with_openai(Arc::new(client));
        }
        Ok(models)
    }

    /// Whether any provider is configured.
    pub fn any(&self) -> bool {
        self.anthropic.is_some() || self.openai.is_some()
    }

    /// The providers and default model, as the worker reports them.
    pub fn providers(&self) -> ModelProviders {
        ModelProviders {
            anthropic: self.anthropic.is_some(),
            openai: self.openai.is_some(),
            default_model: self.default_model.clone(),
        }
    }

    /// The model for a job that asked for `requested` (or for none), routed by
    /// [`ModelProviders::route`].
    pub fn resolve(&self, requested: Option<&str>) -> Result<Resolved, String> {
        let providers = self.providers();
        let (provider, model) = providers.route(requested)?;
        let client = match provider {
            Provider::Anthropic => self.anthropic.clone(),
            Provider::OpenAi => self.openai.clone(),
        }
        .ok_or(NO_PROVIDER)?;
        let label = match self.prices.listed_name(model) {
            Some(name) => name.to_owned(),
            None if self.default_model.as_deref().is_some_and(|d| {
                d == model || d.split_once(':').is_some_and(|(_, m)| m == model)
            }) =>
            {
                model.to_owned()
            }
            None => OTHER_MODEL.to_owned(),
        };
        Ok(Resolved {
            client,
            model: model.to_owned(),
            price: self.prices.get(model).copied(),
            label,
        })
    }
}

impl std::fmt::Debug for Models {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Models")
            .field("anthropic", &self.anthropic.is_some())
            .field("openai", &self.openai.is_some())
            .field("default_model", &self.default_model)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("provider", &self.client.provider())
            .field("model", &self.model)
            .field("price", &self.price)
            .finish()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use async_trait::async_trait;
    use trawl_model::{ModelError, Provider, Request, Response};

    use super::*;

    struct Fake(Provider);

    #[async_trait]
    impl ModelClient for Fake {
        fn provider(&self) -> Provider {
            self.0
        }
        async fn complete(&self, _: &Request) -> Result<Response, ModelError> {
            Err(ModelError::new("fake", "not called", None, false))
        }
    }

    #[test]
    fn names_pick_their_provider_and_price() {
        let both = Models::new(PriceList::default())
            .with_anthropic(Arc::new(Fake(Provider::Anthropic)))
            .with_openai(Arc::new(Fake(Provider::OpenAi)));
        let r = both.resolve(Some("claude-sonnet-4-5")).unwrap();
        assert_eq!(r.client.provider(), Provider::Anthropic);
        assert!(r.price.is_some(), "Claude prices are built in");
        let r = both.resolve(Some("qwen2.5")).unwrap();
        assert_eq!(r.client.provider(), Provider::OpenAi);
        assert_eq!(r.price, None);
        let r = both.resolve(Some("openai:claude-distill")).unwrap();
        assert_eq!(
            (r.client.provider(), r.model.as_str()),
            (Provider::OpenAi, "claude-distill")
        );
    }

    #[test]
    fn metric_labels_are_listed_names_the_default_or_other() {
        let m = Models::new(PriceList::default())
            .with_anthropic(Arc::new(Fake(Provider::Anthropic)))
            .with_openai(Arc::new(Fake(Provider::OpenAi)))
            .with_default_model(Some("openai:qwen2.5-72b".to_owned()));
        let label = |name: &str| m.resolve(Some(name)).unwrap().label;
        assert_eq!(label("claude-sonnet-4-5-20250929"), "claude-sonnet-4-5");
        assert_eq!(label("claude-sonnet-4-5"), "claude-sonnet-4-5");
        assert_eq!(label("qwen2.5-72b"), "qwen2.5-72b");
        assert_eq!(m.resolve(None).unwrap().label, "qwen2.5-72b");
        // What a caller makes up never becomes a label of its own.
        for made_up in ["qwen2.5-72b-x1", "gpt-unlisted-152", "openai:anything"] {
            assert_eq!(label(made_up), OTHER_MODEL, "{made_up}");
        }
    }

    #[test]
    fn missing_models_and_providers_are_named() {
        let none = Models::new(PriceList::default());
        assert!(none.resolve(None).unwrap_err().contains("TRAWL_MODEL"));
        assert!(
            none.resolve(Some("claude-x"))
                .unwrap_err()
                .contains("ANTHROPIC_API_KEY")
        );
        let only_openai = Models::new(PriceList::default())
            .with_openai(Arc::new(Fake(Provider::OpenAi)))
            .with_default_model(Some("llama3".into()));
        assert_eq!(only_openai.resolve(None).unwrap().model, "llama3");
        assert!(
            only_openai
                .resolve(Some("anthropic:claude-x"))
                .unwrap_err()
                .contains("Anthropic is not configured")
        );
    }
}
