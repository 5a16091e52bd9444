// Preloaded into Portkey's gateway by the benchmark (node --import). Portkey 1.15.2 appends
// headers to the Response its fetch returned, and Node's fetch makes those headers immutable:
// every streamed call then fails with "TypeError: immutable". A copy with the same status, body
// and headers is mutable, and costs one object per response.
const original = globalThis.fetch;
globalThis.fetch = async (...args) => {
  const response = await original(...args);
  return new Response(response.body, {
    status: response.status,
    statusText: response.statusText,
    headers: new Headers(response.headers),
  });
};
