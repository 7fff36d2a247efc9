-- The tool layer's catalog: each upstream server's last good `tools/list`, with
-- when it was listed, so a catalog can be assembled without starting every
-- server (`trawl tools search|list`), and a server that is down keeps its tools
-- visible as stale rather than gone.
--
-- `tools` is the JSON array of the tools as the server listed them, kept as text
-- so that it reads back byte for byte (a definition's hash, which pins compare,
-- is of what the server sent). One row per server, replaced by each good listing.
CREATE TABLE tool_listings (
    server      TEXT COLLATE "C" PRIMARY KEY,
    tools       TEXT   NOT NULL,
    listed_ms   BIGINT NOT NULL
);
