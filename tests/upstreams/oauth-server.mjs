// OAuth 2.1 / OpenID authorization server test fixture, built on `oidc-provider`
// (panva/node-oidc-provider, v9; see its docs/README.md "Configuration options"
// and the features `resourceIndicators` (RFC 8707), `clientCredentials`,
// `introspection`, `revocation`, `registration`, plus `interactions.url`,
// `pkce.required`, `issueRefreshToken`, `rotateRefreshToken`, `formats`/JWT
// access tokens (RFC 9068, `typ: at+jwt`)). Started by the Rust integration tests
// on loopback only.
//
// CLI:   node tests/upstreams/oauth-server.mjs CONFIG.json
//
// Binds 127.0.0.1:<port>; issuer = http://127.0.0.1:<port> (plain http).
// When ready prints exactly one line to stdout: {"issuer":"http://127.0.0.1:N","port":N}
// (all logging, including oidc-provider's notices, goes to stderr).
// Exits with status 0 on SIGTERM / SIGINT.
//
// CONFIG.json (only `resources` and `clients` are needed; everything else optional):
// {
//   "port": 0,                              // 0 = pick a free port
//   "resources": [                          // RFC 8707 resource indicators
//     { "uri": "http://127.0.0.1:1234/mcp",
//       "scopes": ["research:read", "research:write", "tools:call"],
//       "ttl_seconds": 3600 }               // access token lifetime (default 3600)
//   ],
//   "clients": [                            // oidc-provider client metadata; extra keys
//     { "client_id": "svc",                 // (application_type, ...) are passed through
//       "client_secret": "svc-secret",
//       "grant_types": ["client_credentials"],
//       "scope": "research:read tools:call",   // string or array: scopes this client may get
//       "token_endpoint_auth_method": "client_secret_basic" },  // default; "none" = public
//     { "client_id": "app", "token_endpoint_auth_method": "none",
//       "grant_types": ["authorization_code", "refresh_token"],
//       "redirect_uris": ["http://127.0.0.1:9999/callback"],
//       "scope": "research:read" }
//   ],
//   "pkce_methods": ["S256"],               // advertised code_challenge_methods_supported;
//                                           // [] removes the field from discovery
//   "advertise_s256": true,                 // false: drop "S256" from the advertised list
//   "pkce_required": true,                  // PKCE required for every client (OAuth 2.1)
//   "auto_approve_user": "alice",           // interaction step logs in this user and grants
//   "key_file": "/tmp/x/signing.jwk",       // write the private signing JWK (with kid) here
//   "key_pem_file": "/tmp/x/signing.pem",   // and/or as a PKCS#8 PEM
//   "signing_alg": "RS256",                 // or "ES256"
//   "rotate_refresh_tokens": true,          // each refresh returns a new refresh token
//   "refresh_token_ttl_seconds": 86400,
//   "default_resource": null,               // resource used when a request names none
//   "dynamic_registration": false           // enable RFC 7591 /reg endpoint
// }
//
// Semantics:
// * Every resource scope and "openid"/"offline_access" are registered as server scopes
//   (discovery `scopes_supported`). A client's `scope` is its allow-list; "openid" is
//   always added, "offline_access" when its grant_types include refresh_token. Requesting
//   a known scope outside the allow-list is REFUSED (400 invalid_scope at /token, or
//   redirect with error=invalid_scope from /auth). Allowed scopes that do not belong to
//   the requested resource, and unknown scopes, are silently dropped from that token
//   (possibly leaving "scope":"" / no scope claim). No `scope` parameter = no scope.
//   Clients without `scope` (and dynamically registered ones) may get every scope.
// * A token request with `resource=<uri>` yields a JWT access token (header typ at+jwt,
//   kid of the signing key in /jwks) with aud=<uri as in config>, scope, iss, exp, iat,
//   jti, sub, client_id. Without any resource the token is opaque (oidc-provider only
//   issues JWTs for a resource server); set default_resource to avoid that.
// * PKCE: oidc-provider v9 implements only S256 and always advertises
//   code_challenge_methods_supported: ["S256"] (not configurable). `pkce_methods` /
//   `advertise_s256` only REWRITE the discovery documents; /auth still accepts only S256.
// * Interaction (no browser needed): GET /auth?... answers 303 -> /interaction/<uid>;
//   that answers 303 -> /auth/<uid> after logging in `auto_approve_user` (or ?user=NAME
//   on the interaction URL) and granting the requested scopes/resources; that answers
//   303 -> redirect_uri?code=...&state=...&iss=.... Add ?deny=1 to the interaction URL
//   for error=access_denied. Without an auto user or ?user, the interaction URL answers
//   200 with a JSON description of the pending interaction. The interaction cookies are
//   synthesized from the URL when a client sends none, so a cookie-less HTTP client works.
// * Endpoints: /auth /token /jwks /me /token/introspection /token/revocation /reg
//   /.well-known/openid-configuration /.well-known/oauth-authorization-server
//   (oidc-provider serves the RFC 8414 path itself, same document). The JWT access
//   tokens cannot be introspected (oidc-provider answers unsupported_token_type).
// * Refresh tokens are issued to every client whose grant_types include refresh_token
//   (no offline_access needed); rotation on by default, and replaying a rotated refresh
//   token revokes the whole grant (invalid_grant afterwards for every token of it).
// * GET /_test/log (the fixture's own): {"requests": [{method, path}], "grants":
//   [{grant_type, client_id}]}, every request and every token issued, in order.
// * State is in memory only. oidc-provider 9 warns "Unsupported runtime" on Node 20
//   (it targets Node 22 LTS+) but works there; the warning goes to stderr.

import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import { once } from 'node:events';

// oidc-provider prints its notices with console.info (stdout); keep stdout for the
// ready line only.
console.log = (...args) => console.error(...args);
console.info = (...args) => console.error(...args);

const { default: Provider, errors } = await import('oidc-provider');

const OIDC_SCOPES = ['openid', 'offline_access'];

function fail(msg) {
  console.error(`oauth-server: ${msg}`);
  process.exit(2);
}

const configPath = process.argv[2];
if (!configPath) fail('usage: node oauth-server.mjs CONFIG.json');
const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));

const toList = (v) => {
  if (v === undefined || v === null) return [];
  return Array.isArray(v) ? v.map(String) : String(v).split(' ').filter(Boolean);
};
const normUri = (u) => URL.parse(u)?.href ?? u;

const resources = (config.resources ?? []).map((r) => {
  if (!r.uri) fail('every resource needs a uri');
  return { uri: r.uri, scopes: toList(r.scopes), ttl: r.ttl_seconds ?? 3600 };
});
function findResource(identifier) {
  return resources.find((r) => r.uri === identifier)
    ?? resources.find((r) => normUri(r.uri) === normUri(identifier));
}

// client_id -> allow-list (Set) or null (no restriction, e.g. dynamically registered)
const allowLists = new Map();
const clients = (config.clients ?? []).map((c) => {
  const {
    scope, grant_types: grantTypes = ['authorization_code'], ...rest
  } = c;
  const meta = { ...rest, grant_types: grantTypes };
  if (meta.response_types === undefined) {
    meta.response_types = grantTypes.includes('authorization_code') ? ['code'] : [];
  }
  if (scope !== undefined) {
    const allowed = new Set(toList(scope));
    allowed.add('openid');
    if (grantTypes.includes('refresh_token')) allowed.add('offline_access');
    meta.scope = [...allowed].join(' ');
    allowLists.set(c.client_id, allowed);
  }
  return meta;
});
function clientAllows(clientId, scope) {
  const allowed = allowLists.get(clientId);
  return !allowed || allowed.has(scope);
}

// Signing key.
const signingAlg = config.signing_alg ?? 'RS256';
const kid = `trawl-test-${crypto.randomBytes(6).toString('hex')}`;
let keyPair;
if (signingAlg === 'RS256') {
  keyPair = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
} else if (signingAlg === 'ES256') {
  keyPair = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
} else {
  fail(`unsupported signing_alg ${signingAlg} (use RS256 or ES256)`);
}
const privateJwk = {
  ...keyPair.privateKey.export({ format: 'jwk' }), kid, alg: signingAlg, use: 'sig',
};
if (config.key_file) {
  fs.writeFileSync(config.key_file, `${JSON.stringify(privateJwk)}\n`, { mode: 0o600 });
}
if (config.key_pem_file) {
  fs.writeFileSync(
    config.key_pem_file,
    keyPair.privateKey.export({ format: 'pem', type: 'pkcs8' }),
    { mode: 0o600 },
  );
}

// Advertised PKCE methods (discovery rewrite only, see header).
let advertisedPkce = toList(config.pkce_methods ?? ['S256']);
if (config.advertise_s256 === false) advertisedPkce = advertisedPkce.filter((m) => m !== 'S256');

const server = http.createServer();
server.listen(config.port ?? 0, '127.0.0.1');
await once(server, 'listening');
const { port } = server.address();
const issuer = `http://127.0.0.1:${port}`;

const staticScopes = new Set(OIDC_SCOPES);
for (const r of resources) r.scopes.forEach((s) => staticScopes.add(s));
for (const [clientId, allowed] of allowLists) {
  const unknown = [...allowed].filter((s) => !staticScopes.has(s));
  if (unknown.length) fail(`client ${clientId}: scope(s) ${unknown.join(' ')} belong to no resource`);
}

const provider = new Provider(issuer, {
  clients,
  jwks: { keys: [privateJwk] },
  scopes: [...staticScopes],
  responseTypes: ['code'], // OAuth 2.1: no implicit / hybrid
  clientDefaults: {
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: signingAlg,
  },
  findAccount: async (ctx, sub) => ({
    accountId: sub,
    claims: async () => ({ sub }),
  }),
  interactions: { url: async (ctx, interaction) => `/interaction/${interaction.uid}` },
  pkce: { required: () => config.pkce_required ?? true },
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  expiresWithSession: async () => false,
  rotateRefreshToken: () => config.rotate_refresh_tokens ?? true,
  ttl: {
    AccessToken: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600,
    ClientCredentials: (ctx, token) => token.resourceServer?.accessTokenTTL ?? 3600,
    RefreshToken: () => config.refresh_token_ttl_seconds ?? 24 * 3600,
    AuthorizationCode: 60,
    IdToken: 3600,
    Interaction: 600,
    Session: 24 * 3600,
    Grant: 24 * 3600,
  },
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    revocation: { enabled: true },
    registration: { enabled: !!config.dynamic_registration },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (ctx, client, oneOf) => {
        if (oneOf) return oneOf.length === 1 ? oneOf[0] : oneOf;
        return config.default_resource ?? undefined;
      },
      // the token endpoint may omit `resource` and still get the (single) granted one
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, identifier, client) => {
        const r = findResource(identifier);
        if (!r) throw new errors.InvalidTarget(`unknown resource ${identifier}`);
        return {
          audience: r.uri,
          scope: r.scopes.filter((s) => clientAllows(client.clientId, s)).join(' '),
          accessTokenTTL: r.ttl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: signingAlg } },
        };
      },
    },
  },
});

// What the tests may ask of the fixture (GET /_test/log): every request's method and
// path, and every successful token request's grant type and client, in order.
const log = { requests: [], grants: [] };
provider.on('grant.success', (ctx) => log.grants.push({
  grant_type: ctx.oidc.params?.grant_type ?? null,
  client_id: ctx.oidc.client?.clientId ?? null,
}));

provider.on('interaction.started', (ctx, prompt) => console.error('oauth-server: interaction', prompt.name, JSON.stringify(prompt.reasons), JSON.stringify(prompt.details)));
provider.on('server_error', (ctx, err) => console.error('oauth-server: server_error', err));

const scopesOf = (s) => toList(s);

// Builds (or extends) the grant covering everything the authorization request asked for,
// limited to what the client may have.
async function buildGrant(details, accountId) {
  const { params } = details;
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId, clientId: params.client_id });
  const requested = scopesOf(params.scope);
  // Resource scopes are registered server scopes too, so oidc-provider's consent check
  // (op_scopes_missing) wants them granted as "OIDC" scopes as well.
  const oidc = requested.filter((s) => staticScopes.has(s) && clientAllows(params.client_id, s));
  if (oidc.length) grant.addOIDCScope(oidc.join(' '));
  const claims = details.prompt.details?.missingOIDCClaims;
  if (claims?.length) grant.addOIDCClaims(claims);
  for (const identifier of toList(params.resource)) {
    const r = findResource(identifier);
    if (!r) continue;
    const granted = requested.filter(
      (s) => r.scopes.includes(s) && clientAllows(params.client_id, s),
    );
    grant.addResourceScope(identifier, granted.join(' '));
  }
  return grant.save();
}

provider.use(async (ctx, next) => {
  const m = /^\/interaction\/([^/]+)$/.exec(ctx.path);
  if (!m || ctx.method !== 'GET') {
    await next();
    if (
      ctx.method === 'GET'
      && ctx.status === 200
      && ctx.body && typeof ctx.body === 'object'
      && ['/.well-known/openid-configuration', '/.well-known/oauth-authorization-server'].includes(ctx.path)
    ) {
      if (advertisedPkce.length) {
        ctx.body.code_challenge_methods_supported = advertisedPkce;
      } else {
        delete ctx.body.code_challenge_methods_supported;
      }
    }
    return;
  }

  ctx.set('Cache-Control', 'no-store');
  let details;
  try {
    details = await provider.interactionDetails(ctx.req, ctx.res);
  } catch (err) {
    ctx.status = 400;
    ctx.body = { error: 'invalid_request', error_description: String(err.message ?? err) };
    return;
  }

  let result;
  if (ctx.query.deny) {
    result = { error: 'access_denied', error_description: 'end-user denied the request' };
  } else {
    const user = ctx.query.user || config.auto_approve_user || details.session?.accountId;
    if (!user) {
      ctx.status = 200;
      ctx.body = {
        uid: details.uid,
        prompt: details.prompt,
        params: details.params,
        hint: 'GET this URL with ?user=NAME to log in and approve, or ?deny=1',
      };
      return;
    }
    const accountId = details.session?.accountId ?? String(user);
    result = { consent: { grantId: await buildGrant(details, accountId) } };
    if (details.prompt.name === 'login' || !details.session?.accountId) {
      result.login = { accountId };
    }
  }
  const returnTo = await provider.interactionResult(ctx.req, ctx.res, result, {
    mergeWithLastSubmission: false,
  });
  ctx.status = 303;
  ctx.redirect(returnTo);
});

// A cookie-less client (e.g. reqwest without a cookie store) still completes the
// interaction: the interaction / resume cookies only carry the uid that is in the URL.
// (oidc-provider cookies are unsigned here since no cookies.keys are configured.)
const handler = provider.callback();
server.on('request', (req, res) => {
  const path = req.url.split('?')[0];
  if (path === '/_test/log') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(log));
    return;
  }
  log.requests.push({ method: req.method, path });
  const cookie = req.headers.cookie ?? '';
  let inject;
  let m = /^\/interaction\/([^/]+)$/.exec(path);
  if (m && !/(^|;\s*)_interaction=/.test(cookie)) inject = `_interaction=${m[1]}`;
  m = /^\/auth\/([^/]+)$/.exec(path);
  if (m && !/(^|;\s*)_interaction_resume=/.test(cookie)) inject = `_interaction_resume=${m[1]}`;
  if (inject) req.headers.cookie = cookie ? `${cookie}; ${inject}` : inject;
  handler(req, res);
});

function shutdown() {
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

process.stdout.write(`${JSON.stringify({ issuer, port })}\n`);
