// A CouchDB-compatible server for the tests: express-pouchdb (PouchDB Server's HTTP layer) over
// in-memory PouchDB databases, served over TLS on a port the OS picks.
// Usage: node pouchdb_server.cjs CERT KEY DIR   (prints "listening PORT" once it accepts)
// DIR holds its config (config.json: the admins, hashed on load) and its log.
"use strict";
const fs = require("fs");
const https = require("https");
const path = require("path");
const express = require("express");

const [cert, key, dir] = process.argv.slice(2);
const PouchDB = require("pouchdb-core")
  .plugin(require("pouchdb-adapter-memory"))
  .plugin(require("pouchdb-adapter-http"))
  .plugin(require("pouchdb-replication"))
  .plugin(require("pouchdb-mapreduce"));

const app = express();
const couch = require("express-pouchdb")(
  PouchDB.defaults({ adapter: "memory", prefix: dir + path.sep }),
  { configPath: path.join(dir, "config.json"), logPath: path.join(dir, "log.txt") }
);
app.use(couch);
const server = https.createServer(
  { cert: fs.readFileSync(cert), key: fs.readFileSync(key) },
  app
);
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
