// The execution API's request and response shapes, with the engine's field names (docs/api.md).

/** Encrypt under a policy code, or under a policy name (the latest version, or the one named). */
export type EncryptRequest =
  | { readonly data: string; readonly policyCode: string }
  | { readonly data: string; readonly policyName: string; readonly policyVersion?: number };

/** Decrypt and rewrap name no policy: the ciphertext carries its own. */
export interface CiphertextRequest {
  readonly data: string;
}

/** The answer to a single encrypt, decrypt or rewrap. */
export interface SingleResponse {
  readonly success: true;
  /** The ciphertext (`hub:<code>:<rest>`) on encrypt and rewrap, the plaintext on decrypt. */
  readonly data: string;
  readonly policyCode: string;
}

/** One item of a batch answer, in request order. */
export interface BatchItemResult {
  readonly success: boolean;
  /** 1000 success, 2000 failure. */
  readonly code: number;
  readonly message: string;
  /** The submitted value (omitted when the item had no string `data`). */
  readonly originalData?: string;
  /** Encrypt and rewrap successes. */
  readonly encryptedData?: string;
  /** Decrypt successes. */
  readonly decryptedData?: string;
  readonly policyCode?: string;
}

export interface BatchResponse {
  /** True only when every item succeeded. */
  readonly success: boolean;
  readonly transportMode: 'json';
  readonly results: BatchItemResult[];
  readonly totalProcessed: number;
  readonly totalSuccess: number;
  readonly totalFailed: number;
  /** Milliseconds; the sum over the requests a chunked batch was sent in. */
  readonly totalProcessingTime: number;
}

/** One line of a stream's answer: the single response, or the error a single request would get. */
export type StreamResult = SingleResponse | { readonly success: false; readonly error: string };
