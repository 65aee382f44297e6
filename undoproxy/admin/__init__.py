"""The admin app (aiohttp): the JSON API, server-sent events and the admin page."""
