//! `GET /openapi.json`: the OpenAPI 3.1 description, generated from the handlers'
//! `#[utoipa::path]` attributes and the response types, so it cannot drift from
//! the code.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

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
        crate::slack::interactions,
        health::healthz,
        health::readyz,
        openapi_json,
    ),
    components(schemas(crate::error::FieldError)),
    modifiers(&BearerAuth, &RateLimited),
    tags(
        (name = "jobs", description = "Submit, read and cancel jobs."),
        (name = "rows", description = "What a job found, rejected and did, a page at a time, \
            and the files its slices produced."),
        (name = "approvals", description = "Decide on jobs and tools that wait for a human, over \
            the API or with a click in Slack."),
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
                 `TRAWL_RATE_JOBS_BURST`); nothing was stored.",
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
pub(crate) async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
