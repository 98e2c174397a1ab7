"""The API's request and response shapes (pydantic), one module per resource: ``analysis``,
``benchmark``, ``comparison``, ``health``, ``leaderboard``, ``progress``, ``result``,
``submission``, ``user``, ``zoo``. Handlers return these public shapes, never ORM rows, so no
secret column reaches a response.
"""
