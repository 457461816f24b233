"""The MetaServer's HTTP surface: one router per audience (the SDK, admins, observability), the request and
response shapes, and the input guards both servers share.
"""
