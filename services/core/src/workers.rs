//! What a worker can run, as it reports itself to the store, and whether the
//! workers of a deployment can run a job.
//!
//! Every worker reports its pool and capabilities when it starts and then on a
//! heartbeat ([`WorkerInfo`]). Submission checks a job against the reports
//! ([`can_run`]): a research job needs a standard worker whose model providers
//! can serve its model, a browse job an isolated worker with a browser (and a
//! model for its model steps). A pool none of whose workers has reported is
//! not held against a job: its workers may start later (a pool scaled to zero),
//! and the job waits for them. Jobs that need neither (pages, searches) are
//! never refused.
//!
//! Which provider serves a model name is decided here, once ([`ModelProviders::route`]):
//! the worker's model registry and the submission check both ask it.

use serde::{Deserialize, Serialize};

use crate::model::Pool;
use crate::spec::JobSpec;

/// A model provider a worker has credentials for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Anthropic,
    #[serde(rename = "openai")]
    OpenAi,
}

/// The model providers of a worker and its default model (`TRAWL_MODEL`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelProviders {
    #[serde(default)]
    pub anthropic: bool,
    #[serde(default)]
    pub openai: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
}

/// The message when a worker has no model provider at all.
pub const NO_PROVIDER: &str = "no model provider is configured: set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL) or OPENAI_BASE_URL";

impl ModelProviders {
    /// Whether any provider is configured.
    pub fn any(&self) -> bool {
        self.anthropic || self.openai
    }

    /// The provider and the provider's model name for `requested` (the job's
    /// model; the default model when `None`). `anthropic:` and `openai:` pick a
    /// provider; a `claude…` name goes to Anthropic when it is configured; any
    /// other name to the OpenAI-compatible server, else to Anthropic.
    pub fn route<'a>(&'a self, requested: Option<&'a str>) -> Result<(Provider, &'a str), String> {
        let name = requested
            .or(self.default_model.as_deref())
            .ok_or("no model: set research.model in the job or TRAWL_MODEL")?;
        if let Some(m) = name.strip_prefix("anthropic:") {
            return if self.anthropic {
                Ok((Provider::Anthropic, m))
            } else {
                Err(format!(
                    "{name}: Anthropic is not configured (ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL)"
                ))
            };
        }
        if let Some(m) = name.strip_prefix("openai:") {
            return if self.openai {
                Ok((Provider::OpenAi, m))
            } else {
                Err(format!(
                    "{name}: no OpenAI-compatible server is configured (OPENAI_BASE_URL or OPENAI_API_KEY)"
                ))
            };
        }
        if name.starts_with("claude") && self.anthropic {
            return Ok((Provider::Anthropic, name));
        }
        if self.openai {
            Ok((Provider::OpenAi, name))
        } else if self.anthropic {
            Ok((Provider::Anthropic, name))
        } else {
            Err(NO_PROVIDER.to_owned())
        }
    }
}

/// What a worker can run besides pages and searches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Research, agent and report slices, and the model steps of browse slices.
    #[serde(default)]
    pub models: ModelProviders,
    /// Browse slices: a local Chromium was found, or a remote browser is set.
    #[serde(default)]
    pub browser: bool,
}

/// A worker as it reported itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// Unique per process: host, process id and start time.
    pub id: String,
    pub pool: Pool,
    pub capabilities: Capabilities,
    /// Slices it runs at once.
    pub concurrency: u32,
    pub started_ms: i64,
    /// Its last report.
    pub heartbeat_ms: i64,
}

/// Whether some worker of `workers` can run `spec`; the reason when none can,
/// naming what is missing.
pub fn can_run(spec: &JobSpec, workers: &[WorkerInfo]) -> Result<(), String> {
    if let Some(r) = &spec.research {
        need(
            workers,
            Pool::Standard,
            "the job has a research question",
            |c| needs_model(c, r.model.as_deref()),
        )?;
    }
    if let Some(b) = &spec.browse {
        let model_steps = b.has_model_steps();
        need(workers, Pool::Isolated, "the job browses", |c| {
            if model_steps {
                needs_model(c, b.model.as_deref()).map_err(|e| {
                    format!("the browse steps include model steps (act, extract by instruction, observe), but {e}")
                })?;
            }
            if !c.browser {
                return Err("no browser: install Chromium or set TRAWL_BROWSER_WS".to_owned());
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Whether a worker can run `model`: no provider at all is said first (a model
/// name would not help), then what [`ModelProviders::route`] says.
fn needs_model(c: &Capabilities, model: Option<&str>) -> Result<(), String> {
    if !c.models.any() {
        return Err(NO_PROVIDER.to_owned());
    }
    c.models.route(model).map(|_| ())
}

/// `Ok` when a worker of `pool` passes `check`, or when no worker of the pool
/// has reported (its capabilities are unknown: a pool scaled to zero, or not
/// started yet, and the job waits for it); else why not, from the first worker
/// of the pool that reported.
fn need(
    workers: &[WorkerInfo],
    pool: Pool,
    what: &str,
    check: impl Fn(&Capabilities) -> Result<(), String>,
) -> Result<(), String> {
    let mut first_error = None;
    for w in workers.iter().filter(|w| w.pool == pool) {
        match check(&w.capabilities) {
            Ok(()) => return Ok(()),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(format!(
            "{what}, but no worker of the {} pool can run it: {e}",
            pool.as_str()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn providers(anthropic: bool, openai: bool, default: Option<&str>) -> ModelProviders {
        ModelProviders {
            anthropic,
            openai,
            default_model: default.map(str::to_owned),
        }
    }

    fn worker(pool: Pool, models: ModelProviders, browser: bool) -> WorkerInfo {
        WorkerInfo {
            id: format!("w-{}", pool.as_str()),
            pool,
            capabilities: Capabilities { models, browser },
            concurrency: 4,
            started_ms: 1,
            heartbeat_ms: 2,
        }
    }

    fn spec(yaml: &str) -> JobSpec {
        JobSpec::parse(yaml).expect("valid spec")
    }

    #[test]
    fn models_are_routed_by_prefix_then_name() {
        let both = providers(true, true, Some("claude-x"));
        assert_eq!(both.route(None).unwrap(), (Provider::Anthropic, "claude-x"));
        assert_eq!(
            both.route(Some("openai:gpt")).unwrap(),
            (Provider::OpenAi, "gpt")
        );
        assert_eq!(
            both.route(Some("llama")).unwrap(),
            (Provider::OpenAi, "llama")
        );
        let anthropic = providers(true, false, None);
        assert_eq!(
            anthropic.route(Some("llama")).unwrap(),
            (Provider::Anthropic, "llama")
        );
        assert!(
            anthropic
                .route(Some("openai:gpt"))
                .unwrap_err()
                .contains("OPENAI_BASE_URL")
        );
        assert!(anthropic.route(None).unwrap_err().contains("TRAWL_MODEL"));
        assert_eq!(
            providers(false, false, None).route(Some("m")).unwrap_err(),
            NO_PROVIDER
        );
    }

    #[test]
    fn pages_run_anywhere_research_needs_a_model_worker() {
        let pages = spec(
            "name: p\npages: {urls: [\"https://example.com/a\"], geos: [us]}\nextract: {fields: {t: {css: h1}}}\n",
        );
        assert_eq!(can_run(&pages, &[]), Ok(()));
        let research = spec("name: r\nresearch:\n  question: what is it?\n  model: claude-x\n");
        // No standard worker has reported: the job waits for one.
        assert_eq!(can_run(&research, &[]), Ok(()));
        let modelless = [worker(Pool::Standard, providers(false, false, None), false)];
        let refused = can_run(&research, &modelless).unwrap_err();
        assert!(
            refused.contains("research question") && refused.contains(NO_PROVIDER),
            "{refused}"
        );
        // A model worker of the other pool does not count.
        let both = [
            modelless[0].clone(),
            worker(Pool::Isolated, providers(true, false, None), true),
        ];
        assert!(can_run(&research, &both).is_err());
        let good = [
            modelless[0].clone(),
            worker(Pool::Standard, providers(true, false, None), false),
        ];
        assert_eq!(can_run(&research, &good), Ok(()));
    }

    #[test]
    fn browse_jobs_need_a_browser_and_for_model_steps_a_model() {
        let browse = spec(
            "name: b\nbrowse:\n  urls: [\"https://example.com/\"]\n  geos: [us]\n  steps:\n    - click: \"a.next\"\n",
        );
        let no_browser = [worker(Pool::Isolated, providers(true, false, None), false)];
        let e = can_run(&browse, &no_browser).unwrap_err();
        assert!(e.contains("no browser"), "{e}");
        let browser = [worker(Pool::Isolated, providers(false, false, None), true)];
        assert_eq!(can_run(&browse, &browser), Ok(()));
        let acting = spec(
            "name: b\nbrowse:\n  urls: [\"https://example.com/\"]\n  geos: [us]\n  model: claude-x\n  steps:\n    - act: \"choose the 512 GB option\"\n",
        );
        let e = can_run(&acting, &browser).unwrap_err();
        assert!(e.contains("model steps") && e.contains(NO_PROVIDER), "{e}");
        let model_browser = [worker(Pool::Isolated, providers(true, false, None), true)];
        assert_eq!(can_run(&acting, &model_browser), Ok(()));
    }
}
