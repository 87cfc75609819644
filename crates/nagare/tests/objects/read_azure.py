"""Reads back what the azure_blob output stored, with azure-storage-blob
(the Azure SDK for Python, not nagare's code); creates containers.

Usage: read_azure.py ENDPOINT ACCOUNT KEY read CONTAINER
       read_azure.py ENDPOINT ACCOUNT KEY create CONTAINER
       read_azure.py ENDPOINT ACCOUNT KEY sas CONTAINER PERMISSIONS
       read_azure.py ENDPOINT ACCOUNT KEY list CONTAINER

ENDPOINT is the account's Blob service URL (Azurite's path-style
http://127.0.0.1:PORT/ACCOUNT). `read` prints one JSON document:
{"objects": [{"key", "size", "etag", "content_type", "storage_class",
"blocks", "body"}...], "uploads": N}, where body is the blob's bytes
base64-encoded, decompressed when the name ends in .gz (gzip module) or
.zst (zstandard), storage_class is the blob's access tier, blocks counts
its committed blocks (0 for a blob put whole), and uploads counts the blobs
that hold uncommitted blocks (blocks put and never committed). `sas`
prints a container SAS (query string) with PERMISSIONS ("wc": write and
create), valid for an hour. `list` prints {"objects": N, "bytes": SIZE}
of the container's blobs, reading no body (benches/azure_blob.sh).
"""
import base64
import datetime
import gzip
import io
import json
import sys

from azure.storage.blob import BlobServiceClient, generate_container_sas
import zstandard

endpoint, account, key, what, container = sys.argv[1:6]
service = BlobServiceClient(
    account_url=endpoint, credential={"account_name": account, "account_key": key}
)
c = service.get_container_client(container)
if what == "create":
    c.create_container()
    sys.exit(0)
if what == "sas":
    print(
        generate_container_sas(
            account,
            container,
            account_key=key,
            permission=sys.argv[6],
            expiry=datetime.datetime.now(datetime.timezone.utc)
            + datetime.timedelta(hours=1),
        )
    )
    sys.exit(0)

if what == "list":
    sizes = [b.size for b in c.list_blobs()]
    print(json.dumps({"objects": len(sizes), "bytes": sum(sizes)}))
    sys.exit(0)

objects = []
for b in c.list_blobs():
    blob = c.get_blob_client(b.name)
    body = blob.download_blob().readall()
    if b.name.endswith(".gz"):
        body = gzip.decompress(body)
    elif b.name.endswith(".zst"):
        body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
    committed, _ = blob.get_block_list("committed")
    objects.append(
        {
            "key": b.name,
            "size": b.size,
            "etag": (b.etag or "").strip('"'),
            "content_type": b.content_settings.content_type,
            "storage_class": b.blob_tier,
            "blocks": len(committed),
            "body": base64.b64encode(body).decode(),
        }
    )
uploads = 0
for b in c.list_blobs(include=["uncommittedblobs"]):
    _, uncommitted = c.get_blob_client(b.name).get_block_list("uncommitted")
    if uncommitted:
        uploads += 1
print(json.dumps({"objects": objects, "uploads": uploads}))
