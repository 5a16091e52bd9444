import { Code, type ConnectError } from "@connectrpc/connect";
import { reasonError } from "../errors.js";

/** The provider declined to draw this (safety or policy); nothing was charged. */
export const imageRefused = (detail: string): ConnectError =>
  reasonError(
    Code.InvalidArgument,
    "IMAGE_REFUSED",
    `The image provider declined the request (${detail}); nothing was charged.`,
    { detail },
  );

/** No stored image under this token: never issued, or expired and removed. */
export const imageNotFound = (): ConnectError =>
  reasonError(Code.NotFound, "IMAGE_NOT_FOUND", "No such image: the URL is wrong or has expired.");
