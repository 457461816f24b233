"""The MetaServer's domain: grants and tokens, the cluster registry and routes, client reports, hot config through
Apollo, audit, placements and notifications. Neither HTTP nor Kafka protocol lives here.
"""
