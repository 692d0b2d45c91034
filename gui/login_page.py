"""The page a visitor without a session gets instead of the app: a login form and nothing of the app.

Gradio's own login screen is the full app page (it embeds the API description of every endpoint), so the
session guard serves this one. It posts to Gradio's /login, which sets the session cookie, then reloads.
"""
from __future__ import annotations

import html

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex"><title>Atelier: log in</title>
<style>
 body {{ font-family: system-ui, sans-serif; background: #f6f7fb; display: flex; min-height: 100vh; margin: 0;
        align-items: center; justify-content: center; }}
 form {{ background: #fff; padding: 2rem; border-radius: 10px; box-shadow: 0 2px 12px #0002; width: 20rem; }}
 label {{ display: block; margin: .8rem 0 .2rem; font-size: .9rem; }}
 input {{ width: 100%; box-sizing: border-box; padding: .5rem; font-size: 1rem; }}
 button {{ margin-top: 1.2rem; width: 100%; padding: .6rem; font-size: 1rem; cursor: pointer; }}
 #error {{ color: #b00020; min-height: 1.2rem; margin-top: .8rem; font-size: .9rem; }}
</style></head>
<body><form id="login" autocomplete="on">
<p>{message}</p>
<label for="username">username</label><input id="username" name="username" autocomplete="username" required>
<label for="password">password</label><input id="password" name="password" type="password"
 autocomplete="current-password" required>
<button type="submit">Login</button>
<div id="error" role="alert"></div>
</form>
<script>
const form = document.getElementById("login"), error = document.getElementById("error");
form.addEventListener("submit", async (event) => {{
  event.preventDefault();
  error.textContent = "";
  let response;
  try {{
    response = await fetch("login", {{method: "POST", body: new URLSearchParams(new FormData(form)),
                                      credentials: "same-origin"}});
  }} catch (err) {{
    error.textContent = "The server did not answer: is Atelier still running?";
    return;
  }}
  if (response.ok) {{ window.location.reload(); return; }}
  let detail = "Incorrect credentials.";
  try {{ detail = (await response.json()).detail || detail; }} catch (err) {{}}
  error.textContent = detail;
  form.reset();
  document.getElementById("username").focus();
}});
</script></body></html>
"""


def login_page(message: str) -> bytes:
    """The login page's HTML, with `message` (the app's auth message) escaped."""
    return _PAGE.format(message=html.escape(message)).encode("utf-8")
