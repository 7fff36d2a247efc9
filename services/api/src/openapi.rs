//! `GET /openapi.json`: the OpenAPI 3.1 description, generated from the handlers'
//! `#[utoipa::path]` attributes and the response types, so it cannot drift from
//! the code. [`document`] completes it from what the server checks with: the job
//! spec's JSON Schema (`trawl_core::spec::schema`, built from the checker's
//! field lists and limits), the limits of the query parameters and headers (the
//! constants the handlers use), and every problem each operation can answer
//! with, an example of each made by [`ApiError::problem`].

use axum::Json;
use serde_json::{Map, Value, json};
use trawl_core::ports::PortError;
use trawl_core::spec::{SpecError, SpecErrors};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::{ApiError, PROBLEM_JSON};
use crate::{approvals, artifacts, health, jobs, rows};

/// The API's description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "trawl",
        description = "Research jobs split into slices, run by workers. Errors are RFC 9457 \
            `application/problem+json`. The `/v1` routes need `Authorization: Bearer <key>` \
            unless the server runs open.",
    ),
    paths(
        jobs::submit_job,
        jobs::get_job,
        jobs::cancel_job,
        rows::items,
        rows::rejections,
        rows::trace,
        rows::report,
        artifacts::list,
        artifacts::get,
        approvals::list,
        approvals::approve,
        approvals::reject,
        crate::usage::usage,
        crate::slack::interactions,
        health::healthz,
        health::readyz,
        openapi_json,
    ),
    components(schemas(crate::error::FieldError, crate::approvals::StatusFilter)),
    modifiers(&BearerAuth, &RateLimited),
    tags(
        (name = "jobs", description = "Submit, read and cancel jobs."),
        (name = "rows", description = "What a job found, rejected and did, a page at a time, \
            and the files its slices produced."),
        (name = "approvals", description = "Decide on jobs and tools that wait for a human, over \
            the API or with a click in Slack."),
        (name = "usage", description = "A tenant's spend and slices by day, its limits and \
            what is left of them."),
        (name = "health", description = "Liveness and readiness probes."),
    ),
)]
pub struct ApiDoc;

/// Adds the `bearer` security scheme the `/v1` routes name.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API key of the deployment."))
                    .build(),
            ),
        );
    }
}

/// Adds the `429` of the per-caller rate of job submissions to `POST /v1/jobs`
/// (the limit is a layer on the route, not part of the handler).
struct RateLimited;

impl Modify for RateLimited {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::header::HeaderBuilder;
        use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder, schema};
        let Some(op) = openapi
            .paths
            .paths
            .get_mut("/v1/jobs")
            .and_then(|p| p.post.as_mut())
        else {
            return;
        };
        let res = ResponseBuilder::new()
            .description(
                "Over the caller's rate of job submissions (`TRAWL_RATE_JOBS`, \
                 `TRAWL_RATE_JOBS_BURST`), or over a limit of its tenant that frees in time \
                 (`over-limit`: slices in flight, concurrent jobs, jobs or spend per day or \
                 month, `TRAWL_TENANT_LIMITS`); nothing was stored.",
            )
            .header(
                "Retry-After",
                HeaderBuilder::new()
                    .schema(Some(schema::Object::with_type(schema::Type::Integer)))
                    .description(Some("Seconds to wait before trying again."))
                    .build(),
            )
            .content(
                crate::error::PROBLEM_JSON,
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("Problem")))
                    .build(),
            )
            .build();
        op.responses.responses.insert("429".to_owned(), res.into());
    }
}

/// This description.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "health",
    responses((status = 200, description = "The OpenAPI description of this API.", body = Object)),
)]
pub(crate) async fn openapi_json() -> Json<Value> {
    Json(document())
}

/// The whole description, as served.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|e| {
        // The derive's types always serialize; say so in the document if not.
        json!({"openapi": "3.1.0", "info": {"title": "trawl", "version": "?",
               "description": format!("the description could not be made: {e}")}, "paths": {}})
    });
    let schemas = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut);
    if let Some(schemas) = schemas {
        schemas.extend(trawl_core::spec::schema::components(
            "#/components/schemas/",
        ));
    }
    let spec_ref =
        json!({"$ref": format!("#/components/schemas/{}", trawl_core::spec::schema::JOB_SPEC)});
    if let Some(content) = doc
        .pointer_mut("/paths/~1v1~1jobs/post/requestBody/content")
        .and_then(Value::as_object_mut)
    {
        for media in content.values_mut() {
            media["schema"] = spec_ref.clone();
        }
    }
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return doc;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in item.iter_mut() {
            if let Some(params) = op.get_mut("parameters").and_then(Value::as_array_mut) {
                for param in params {
                    limit_parameter(param);
                }
            }
            let problems = problems(path, method);
            if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                add_problems(responses, &problems);
            }
        }
    }
    doc
}

/// The schema of a parameter, with the limits the handlers enforce.
fn limit_parameter(param: &mut Value) {
    let schema = match param["name"].as_str() {
        Some("limit") => json!({"type": "integer", "minimum": 1, "maximum": rows::MAX_LIMIT,
                                "default": rows::DEFAULT_LIMIT}),
        Some("cursor") => json!({"type": "string", "pattern": rows::CURSOR_PATTERN}),
        Some("Idempotency-Key") => json!({"type": "string", "minLength": 1,
            "maxLength": jobs::MAX_IDEMPOTENCY_KEY, "pattern": jobs::IDEMPOTENCY_KEY_PATTERN}),
        _ => return,
    };
    param["schema"] = schema;
}

/// Every problem `method` `path` can answer with, one of each kind.
fn problems(path: &str, method: &str) -> Vec<ApiError> {
    use ApiError as E;
    let down = || E::Unavailable(PortError::Unavailable("the store".to_owned()));
    let internal = || E::Internal(anyhow::anyhow!("a broken invariant"));
    let job = || E::NotFound("job job_0193b4c1a2f04e9d2c7a1b3e5f60".to_owned());
    // Every route behind the key check.
    let mut out = if path.starts_with("/v1/") && path != "/v1/integrations/slack/interactions" {
        vec![
            E::TokenInQuery,
            E::Unauthorized {
                presented: false,
                why: None,
            },
            E::InsufficientScope(crate::oauth::SCOPE_READ),
            down(),
            internal(),
        ]
    } else {
        Vec::new()
    };
    if method == "post" {
        out.push(E::RequestTimeout);
    }
    let bad_query = || E::BadRequest("limit must be from 1 to 1000".to_owned());
    match (method, path) {
        ("post", "/v1/jobs") => out.extend([
            E::BadRequest(
                "Idempotency-Key must be one string of 1 to 255 visible ASCII characters"
                    .to_owned(),
            ),
            E::MalformedBody(
                "not a JSON document: EOF while parsing a value at line 1 column 0".to_owned(),
            ),
            E::PayloadTooLarge(crate::state::ApiState::DEFAULT_BODY_LIMIT),
            E::UnsupportedMediaType(Some("text/plain".to_owned())),
            E::InvalidSpec(SpecErrors(vec![SpecError {
                path: "searches.geos[0]".to_owned(),
                reason: "\"US\" must be lower case ISO 3166-1 alpha-2 (\"us\")".to_owned(),
            }])),
            E::IdempotencyKeyReuse,
            E::Unrunnable("no model worker is reported".to_owned()),
            E::TooManyRequests { retry_after: 1 },
            E::OverLimit(Box::new(trawl_core::tenant::OverLimit {
                limit: "jobs_per_day",
                allowed: 500.0,
                used: 500.0,
                requested: 1.0,
                retry_after: Some(std::time::Duration::from_secs(3_600)),
            })),
            E::OverLimit(Box::new(trawl_core::tenant::OverLimit {
                limit: "slices_per_job",
                allowed: 10_000.0,
                used: 0.0,
                requested: 996_000.0,
                retry_after: None,
            })),
        ]),
        ("get", "/v1/usage") => out.extend([
            E::BadRequest("days must be 1 to 366, not 0".to_owned()),
            E::Forbidden("only an admin may read another tenant's usage".to_owned()),
        ]),
        (
            "get",
            "/v1/jobs/{id}"
            | "/v1/jobs/{id}/report"
            | "/v1/jobs/{id}/artifacts"
            | "/v1/jobs/{id}/artifacts/{name}",
        ) => out.push(job()),
        ("post", "/v1/jobs/{id}/cancel") => out.extend([
            job(),
            E::Conflict(
                "job job_0193b4c1a2f04e9d2c7a1b3e5f60 has already ended: it is succeeded"
                    .to_owned(),
            ),
        ]),
        ("get", "/v1/jobs/{id}/items" | "/v1/jobs/{id}/rejections" | "/v1/jobs/{id}/trace") => {
            out.extend([bad_query(), job()]);
        }
        ("get", "/v1/approvals") => out.push(E::BadRequest(
            "Failed to deserialize query string: status: unknown variant `done`".to_owned(),
        )),
        ("post", "/v1/approvals/{id}/approve" | "/v1/approvals/{id}/reject") => out.extend([
            E::NotFound("approval apr_1".to_owned()),
            E::Conflict("approval apr_1 is already approved".to_owned()),
        ]),
        ("post", "/v1/integrations/slack/interactions") => out.extend([
            E::NotFound("Slack integration: it is not configured".to_owned()),
            E::BadSignature("the request is older than five minutes".to_owned()),
            E::BadRequest("not an interaction payload".to_owned()),
            E::PayloadTooLarge(crate::state::ApiState::DEFAULT_BODY_LIMIT),
            down(),
            internal(),
        ]),
        ("get", "/readyz") => out.push(E::NotReady(
            vec!["store"],
            json!({"store": "unavailable", "queue": "ok", "cache": "ok"}),
        )),
        _ => {}
    }
    out
}

/// Adds each problem of `problems` to the response of its status, with the
/// Problem schema and an example named by its type.
fn add_problems(responses: &mut Map<String, Value>, problems: &[ApiError]) {
    for e in problems {
        let problem = e.problem();
        let status = problem.status.to_string();
        let slug = problem
            .kind
            .strip_prefix(crate::error::PROBLEM_BASE)
            .unwrap_or(&problem.kind)
            .to_owned();
        let res = responses
            .entry(status)
            .or_insert_with(|| json!({"description": problem.title}));
        let content = &mut res["content"][PROBLEM_JSON];
        content["schema"] = json!({"$ref": "#/components/schemas/Problem"});
        content["examples"][&slug] = json!({
            "summary": problem.title,
            "value": serde_json::to_value(&problem).unwrap_or(Value::Null),
        });
        if matches!(e, ApiError::TooManyRequests { .. }) && res.get("headers").is_none() {
            res["headers"] = json!({"Retry-After": {"description": "Seconds to wait before trying again.",
                                    "schema": {"type": "integer"}}});
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The Problem schema of `doc`, as a validator (references resolved in
    /// the document itself).
    fn problem_validator(doc: &Value) -> jsonschema::Validator {
        let mut root = doc.clone();
        root["$ref"] = json!("#/components/schemas/Problem");
        jsonschema::validator_for(&root).unwrap()
    }

    #[test]
    fn every_error_response_has_an_example_of_each_problem_valid_for_the_schema() {
        let doc = document();
        let problem = problem_validator(&doc);
        let mut seen = std::collections::HashSet::new();
        let mut ops = 0;
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops += 1;
                let want = problems(path, method);
                for (status, res) in op["responses"].as_object().unwrap() {
                    let code: u16 = status.parse().unwrap();
                    if code < 400 {
                        continue;
                    }
                    let content = &res["content"][PROBLEM_JSON];
                    assert_eq!(
                        content["schema"]["$ref"], "#/components/schemas/Problem",
                        "{method} {path} {status}"
                    );
                    let examples = content["examples"]
                        .as_object()
                        .unwrap_or_else(|| panic!("{method} {path} {status}: no example"));
                    assert!(!examples.is_empty(), "{method} {path} {status}");
                    for (slug, ex) in examples {
                        let v = &ex["value"];
                        let errors: Vec<String> =
                            problem.iter_errors(v).map(|e| e.to_string()).collect();
                        assert!(
                            errors.is_empty(),
                            "{method} {path} {status} {slug}: {errors:?}"
                        );
                        assert_eq!(v["status"], code, "{method} {path} {slug}");
                        assert_eq!(
                            v["type"],
                            format!("{}{slug}", crate::error::PROBLEM_BASE),
                            "{method} {path}"
                        );
                        seen.insert(slug.clone());
                    }
                }
                // Every problem the operation can answer with is there.
                for e in want {
                    let p = e.problem();
                    let res = &op["responses"][p.status.to_string()];
                    let slug = p.kind.strip_prefix(crate::error::PROBLEM_BASE).unwrap();
                    assert!(
                        res["content"][PROBLEM_JSON]["examples"][slug].is_object(),
                        "{method} {path}: {slug} missing"
                    );
                }
            }
        }
        assert_eq!(ops, 17);
        for slug in [
            "invalid-spec",
            "over-limit",
            "forbidden",
            "malformed-body",
            "unsupported-media-type",
            "payload-too-large",
            "idempotency-key-reuse",
            "too-many-requests",
            "unauthorized",
            "insufficient-scope",
            "not-found",
            "conflict",
            "bad-request",
            "not-ready",
            "unavailable",
            "internal",
        ] {
            assert!(seen.contains(slug), "{slug}");
        }
    }

    #[test]
    fn the_job_spec_body_is_the_checkers_schema() {
        let doc = document();
        let body = &doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"];
        for media in ["application/json", "application/yaml", "text/yaml"] {
            assert_eq!(
                body[media]["schema"]["$ref"], "#/components/schemas/JobSpec",
                "{media}"
            );
        }
        let spec = &doc["components"]["schemas"]["JobSpec"];
        assert_eq!(spec["required"], json!(["name"]));
        assert_eq!(spec["additionalProperties"], false);
        let props: Vec<&str> = spec["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut props = props;
        props.sort_unstable();
        let mut known = trawl_core::spec::fields::JOB.to_vec();
        known.sort_unstable();
        assert_eq!(props, known);
        // Each reference in the document names a schema it has.
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for part in text.split("#/components/schemas/").skip(1) {
            let name: String = part.chars().take_while(|c| *c != '"').collect();
            assert!(schemas.contains_key(&name), "{name}");
        }
    }

    #[test]
    fn parameters_carry_the_limits_the_handlers_enforce() {
        let doc = document();
        let param = |path: &str, method: &str, name: &str| {
            doc["paths"][path][method]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{method} {path} {name}"))
                .clone()
        };
        for path in [
            "/v1/jobs/{id}/items",
            "/v1/jobs/{id}/rejections",
            "/v1/jobs/{id}/trace",
        ] {
            let p = param(path, "get", "limit");
            assert_eq!(p["schema"]["minimum"], 1, "{path}");
            assert_eq!(p["schema"]["maximum"], rows::MAX_LIMIT, "{path}");
        }
        let status = param("/v1/approvals", "get", "status");
        let text = status.to_string();
        assert!(text.contains("StatusFilter"), "{text}");
        assert_eq!(
            doc["components"]["schemas"]["StatusFilter"]["enum"],
            json!(["pending", "all"])
        );
        let key = param("/v1/jobs", "post", "Idempotency-Key");
        assert_eq!(key["in"], "header");
        assert_eq!(key["schema"]["minLength"], 1);
        assert_eq!(key["schema"]["maxLength"], jobs::MAX_IDEMPOTENCY_KEY);
        assert_eq!(key["schema"]["pattern"], r"^[\x21-\x7E]+$");
    }

    /// The links of a submitted job lead to the operations that apply to any
    /// job, each found by a unique operation id and given every path
    /// parameter; the report (research jobs only) is not among them.
    #[test]
    fn a_submitted_job_links_to_what_applies_to_every_job() {
        let doc = document();
        let mut ops = std::collections::HashMap::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                let id = op["operationId"].as_str().unwrap().to_owned();
                let dup = ops.insert(id.clone(), (method.clone(), path.clone(), op.clone()));
                assert!(dup.is_none(), "operationId {id} is not unique");
            }
        }
        let res = &doc["paths"]["/v1/jobs"]["post"]["responses"]["202"];
        let body = &doc["components"]["schemas"]["JobAccepted"];
        let links = res["links"].as_object().unwrap();
        let mut targets = Vec::new();
        for (name, link) in links {
            let target = link["operationId"].as_str().unwrap();
            let (method, path, op) = &ops[target];
            targets.push(format!("{method} {path}"));
            let path_params: Vec<&str> = op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["in"] == "path")
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            let given: Vec<&str> = link["parameters"]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(given, path_params, "{name}");
            for expr in link["parameters"].as_object().unwrap().values() {
                let member = expr
                    .as_str()
                    .unwrap()
                    .strip_prefix("$response.body#/")
                    .unwrap();
                assert!(
                    body["required"]
                        .as_array()
                        .unwrap()
                        .contains(&json!(member)),
                    "{name}: {member}"
                );
            }
        }
        targets.sort_unstable();
        assert_eq!(
            targets,
            [
                "get /v1/jobs/{id}",
                "get /v1/jobs/{id}/artifacts",
                "get /v1/jobs/{id}/items",
                "get /v1/jobs/{id}/rejections",
                "get /v1/jobs/{id}/trace",
                "post /v1/jobs/{id}/cancel",
            ]
        );
    }

    #[test]
    fn job_submission_documents_its_rate_limit() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let res = &doc["paths"]["/v1/jobs"]["post"]["responses"]["429"];
        assert!(res["headers"]["Retry-After"].is_object(), "{res}");
        assert_eq!(
            res["content"][crate::error::PROBLEM_JSON]["schema"]["$ref"],
            "#/components/schemas/Problem"
        );
        assert!(doc["components"]["schemas"]["Problem"].is_object());
    }
}
