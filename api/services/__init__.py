"""Service functions: everything a request does beyond parsing it and shaping the response.

The REST routes and the web pages (issue 6) call these, so there is one path to the data.
"""
