// A real OpenID Connect provider for the console's single sign-on test (tests/test_console_sso.py), built on
// the npm package oidc-provider: one confidential client that must use PKCE, its own login and consent pages
// (devInteractions: any password), and accounts whose `groups` claim the console maps to roles.
//
// Usage: node provider.mjs <port>. Environment: OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_REDIRECT_URI, OIDC_ACCOUNTS (JSON:
// login -> {groups: [...], in: "id_token" | "userinfo"}: where the groups claim is given, both ways providers
// do it). Listens on 127.0.0.1 only; /health answers once it is up.
import http from 'node:http';
import Provider from 'oidc-provider';

const env = process.env;
const port = Number(process.argv[2]);
const accounts = JSON.parse(env.OIDC_ACCOUNTS || '{}');

const provider = new Provider(`http://127.0.0.1:${port}`, {
  clients: [{
    client_id: env.OIDC_CLIENT_ID,
    client_secret: env.OIDC_CLIENT_SECRET,
    redirect_uris: [env.OIDC_REDIRECT_URI],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: { openid: ['sub'], profile: ['name', 'preferred_username'], email: ['email'], groups: ['groups'] },
  conformIdTokenClaims: false, // the scopes' claims go into the ID token, as most company providers do
  cookies: { keys: ['ykafka-test-only-cookie-key'] },
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, id) {
    if (!Object.hasOwn(accounts, id)) return undefined;
    return {
      accountId: id,
      async claims(use) {
        const { groups, in: where } = accounts[id];
        return { sub: id, preferred_username: id, name: id, email: `${id}@example.test`,
                 groups: use === where ? groups : undefined };
      },
    };
  },
});

const callback = provider.callback();
http.createServer((req, res) => {
  if (req.url === '/health') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
    return;
  }
  callback(req, res);
}).listen(port, '127.0.0.1');
