"""The MetaServer's storage: its tables (SQLAlchemy Core), the engine and migrations, and the grant path's
pre-written SQL.
"""
