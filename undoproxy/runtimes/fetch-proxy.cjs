// undoproxy: make Node's global fetch() and the https module's default agent honour
// HTTPS_PROXY / HTTP_PROXY / NO_PROXY.
//
// Loaded with NODE_OPTIONS="--require <this file>" (set by `undoproxy env`). Node 20's fetch
// (its bundled undici) ignores the proxy variables, and undici's EnvHttpProxyAgent is not
// importable from Node 20 without installing the `undici` package. Node built-ins are enough:
// the bundled undici's Agent class is reachable through the global dispatcher, and an Agent
// takes a `connect` function, which here opens a CONNECT tunnel through the proxy (with the
// credentials of the proxy URL) and hands undici the TLS socket inside it. Certificates are
// verified by Node's own store, to which NODE_EXTRA_CA_CERTS adds undoproxy's CA.
// Node >= 24 (and 22.21+) do this natively with NODE_USE_ENV_PROXY=1: then this does nothing.
"use strict";

(function install() {
  const [major, minor] = process.versions.node.split(".").map(Number);
  const native = major >= 24 || (major === 22 && minor >= 21);
  if ((native && process.env.NODE_USE_ENV_PROXY === "1") || typeof fetch !== "function") return;
  const env = (name) => process.env[name.toLowerCase()] || process.env[name.toUpperCase()] || "";
  const proxies = { "https:": env("https_proxy"), "http:": env("http_proxy") };
  if (!proxies["https:"] && !proxies["http:"]) return;

  const http = require("node:http");
  const net = require("node:net");
  const tls = require("node:tls");
  const KEY = Symbol.for("undici.globalDispatcher.1");

  function bypass(host, port) {
    const list = env("no_proxy").split(/[\s,]+/).filter(Boolean);
    host = host.replace(/^\[|\]$/g, "").toLowerCase();
    return list.some((entry) => {
      if (entry === "*") return true;
      let [name, p] = entry.toLowerCase().replace(/^\*?\./, ".").split(/:(?=\d+$)/);
      if (p && String(p) !== String(port)) return false;
      name = name.replace(/^\[|\]$/g, "");
      return host === name.replace(/^\./, "") || (name.startsWith(".") ? host.endsWith(name) : host.endsWith("." + name));
    });
  }

  function secure(socket, opts, port, callback) {
    const servername = net.isIP(opts.hostname) ? undefined : opts.servername || opts.hostname;
    const where = socket ? { socket, host: opts.hostname } : { host: opts.hostname, port };
    const tlsSocket = tls.connect({ ...where, servername, ALPNProtocols: ["http/1.1"] });
    let called = false;
    const once = (err, s) => called || ((called = true), callback(err, s));
    tlsSocket.once("secureConnect", () => once(null, tlsSocket));
    tlsSocket.once("error", (err) => once(err, null));
  }

  function connect(opts, callback) {
    const port = Number(opts.port) || (opts.protocol === "https:" ? 443 : 80);
    const proxy = proxies[opts.protocol];
    if (!proxy || bypass(opts.hostname, port)) {
      if (opts.protocol !== "https:") {
        const socket = net.connect({ host: opts.hostname, port });
        socket.once("connect", () => callback(null, socket));
        socket.once("error", (err) => callback(err, null));
        return;
      }
      return secure(null, opts, port, callback);
    }
    tunnel(proxy, opts.hostname, port, (err, socket) => {
      if (err) return callback(err, null);
      if (opts.protocol === "https:") return secure(socket, opts, port, callback);
      callback(null, socket);
    });
  }

  // A CONNECT tunnel to host:port through the proxy, with the proxy URL's credentials.
  function tunnel(proxy, hostname, port, callback) {
    const url = new URL(proxy.includes("://") ? proxy : "http://" + proxy);
    const target = `${hostname.includes(":") ? `[${hostname}]` : hostname}:${port}`;
    const headers = { Host: target };
    if (url.username) {
      const creds = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
      headers["Proxy-Authorization"] = "Basic " + Buffer.from(creds).toString("base64");
    }
    const req = http.request({
      host: url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(url.port) || 80,
      method: "CONNECT",
      path: target,
      headers,
      agent: false,
    });
    req.once("connect", (res, socket) => {
      if (res.statusCode !== 200) {
        socket.destroy();
        return callback(new Error(`proxy ${url.host} refused the tunnel to ${target}: ${res.statusCode}`), null);
      }
      callback(null, socket);
    });
    req.once("error", (err) => callback(err, null));
    req.end();
  }

  // The https module's default agent (https.get/request without an agent of their own):
  // Node 20 ignores the proxy variables there too.
  const https = require("node:https");
  class TunnelingAgent extends https.Agent {
    createConnection(options, callback) {
      const host = options.host || options.hostname || "localhost";
      const port = Number(options.port) || 443;
      if (!proxies["https:"] || bypass(host, port)) return super.createConnection(options, callback);
      tunnel(proxies["https:"], host, port, (err, socket) => {
        if (err) return callback(err);
        callback(null, tls.connect({ ...options, socket }));
      });
      return undefined;
    }
  }
  https.globalAgent = new TunnelingAgent(https.globalAgent.options);

  // The first fetch() loads the bundled undici, which puts its default Agent at KEY.
  fetch("data:,").catch(() => {});
  const Agent = globalThis[KEY] && globalThis[KEY].constructor;
  if (typeof Agent !== "function") return;
  globalThis[KEY] = new Agent({ connect });
})();
