/** The part of autocannon's library API the harness uses (the package ships no types). */
declare module "autocannon" {
  /** A request as autocannon builds it, handed to `setupRequest`. */
  interface RequestParams {
    method: string;
    path: string;
    headers: Record<string, string>;
    body: string | Buffer;
    [option: string]: unknown;
  }
  /** One entry of `requests`: autocannon cycles through them on each connection. */
  interface Request {
    headers?: Record<string, string>;
    setupRequest?: (request: RequestParams, context: Record<string, unknown>) => RequestParams;
  }
  interface Options {
    url: string;
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    connections?: number;
    duration?: number;
    pipelining?: number;
    requests?: Request[];
  }
  interface Histogram {
    average: number;
    mean: number;
    p50: number;
    p90: number;
    p99: number;
    max: number;
    total: number;
  }
  interface Result {
    requests: Histogram;
    latency: Histogram;
    non2xx: number;
    errors: number;
    timeouts: number;
  }
  function autocannon(options: Options): Promise<Result>;

  export { type RequestParams };
  export default autocannon;
}
