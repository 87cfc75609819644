"""Reads back what the s3 output stored, with boto3 (not nagare's code).

Usage: read_s3.py ENDPOINT ACCESS_KEY SECRET_KEY BUCKET

Prints one JSON document: {"objects": [{"key", "size", "etag",
"content_type", "storage_class", "body"}...], "uploads": N}, where body is
the object's bytes base64-encoded, decompressed when the key ends in .gz
(gzip module) or .zst (zstandard), and uploads counts the multipart uploads
begun and neither completed nor aborted.
"""
import base64
import gzip
import io
import json
import sys

import boto3
import zstandard

endpoint, access, secret, bucket = sys.argv[1:5]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=access,
    aws_secret_access_key=secret,
    region_name="us-east-1",
)
objects = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
    for o in page.get("Contents", []):
        got = s3.get_object(Bucket=bucket, Key=o["Key"])
        body = got["Body"].read()
        if o["Key"].endswith(".gz"):
            body = gzip.decompress(body)
        elif o["Key"].endswith(".zst"):
            body = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)).read()
        objects.append(
            {
                "key": o["Key"],
                "size": o["Size"],
                "etag": o["ETag"].strip('"'),
                "content_type": got.get("ContentType"),
                "storage_class": got.get("StorageClass") or o.get("StorageClass"),
                "body": base64.b64encode(body).decode(),
            }
        )
uploads = s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
print(json.dumps({"objects": objects, "uploads": len(uploads)}))
