"""Apollo-compatible config service: ykafka's embedded default config center.

Speaks Apollo's config-service protocol (`/configs`, `/configfiles`, `/notifications/v2`, access-key
signatures) and the Open API subset the MetaServer uses, so the SDK and the MetaServer are written once
against Apollo's documented APIs and run unchanged against this service or a real Apollo.
Entry points: `python -m metaserver.configcenter serve` and `metaserver.configcenter.app.create_app`.
"""
